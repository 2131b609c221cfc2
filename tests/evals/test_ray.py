"""`eval --ray`: the same records as the local runner from a `ray start --head` cluster, nothing lost or doubled
when an actor is killed mid-run, and one-line errors for a dead address or a missing Ray.

The cluster is our own `ray start --head --block` in its own session: stopped by its process id (and anything
left in that session killed by id), never with `ray stop`, which would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaxtui.cli import main
from relaxtui.commands import eval as eval_command
from relaxtui.costmodel.profiles import memory_bound
from relaxtui.evals.run.results import MEASURED_PROFILE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(300)


def fails(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("relaxtui: error: ") and err.count("\n") == 1 and message in err, err


def eval_argv(model, out, *extra):
    """A tiny greedy grid: 2 configs x problems, 8 tokens each, one thread per pair (2 actors share 2 cores)."""
    return ["eval", "aime", "--max-tokens", "8", "--verifier", str(model), "--drafter", str(model), "--no-spec",
            "--temperature", "0", "--ctx-size", "1024", "--threads", "1", "--out", str(out), *extra]


def priced_already(out):
    """A run folder with a cost profile in it, so the run skips calibrating (seconds we spend once, not thrice)."""
    out.mkdir(parents=True)
    (out / MEASURED_PROFILE).write_text(memory_bound().to_json())
    return out


def records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def free_ports(count):
    """Ports nobody listens on now, so this cluster never collides with another Ray on the machine."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def session_pids(sid):
    """The live processes of session ``sid`` (a zombie is dead already: only its parent's reaping is left)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid=,stat="], capture_output=True, text=True, check=True).stdout
    return [int(pid) for pid, s, stat in (line.split()[:3] for line in out.splitlines())
            if int(s) == sid and not stat.startswith("Z")]


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """HOST:PORT of a one-machine Ray cluster, as `ray start --head` prints it; torn down even on failure."""
    pytest.importorskip("ray")
    temp = Path(f"/tmp/rt-ray-{os.getpid()}")  # short: Ray's unix sockets live under it
    log = tmp_path_factory.mktemp("ray") / "head.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}  # else a ~/.ray/auth_token left by any earlier local Ray turns tokens on
    # no Ray Client server: it needs `ray[client]`, and the driver joins through the GCS address anyway
    ports = dict(zip(["port", "dashboard-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                      "metrics-export-port", "runtime-env-agent-port"], free_ports(6), strict=True))
    ray_cli = Path(sys.executable).with_name("ray")  # the CLI of the Ray this Python imports
    if not ray_cli.exists():
        pytest.skip(f"{ray_cli} missing: install Ray into this environment (pip install 'relaxtui[cluster]')")
    command = [str(ray_cli), "start", "--head", "--block", "--num-cpus=2",
               "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}",
               "--object-store-memory=100000000", *(f"--{name}={port}" for name, port in ports.items())]
    with log.open("w") as stream:
        head = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        address = None
        deadline = time.monotonic() + 120
        while address is None and time.monotonic() < deadline and head.poll() is None:
            time.sleep(0.5)
            found = re.search(r"ray start --address='([^']+)'", log.read_text())
            address = found.group(1) if found else None
        if address is None:
            pytest.fail(f"ray start --head did not come up:\n{log.read_text()[-3000:]}")
        yield address
    finally:
        head.send_signal(signal.SIGTERM)  # --block: stops the processes it started
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        # anything that outlived it is ours (our session): killed by id, again until none is left, for 10 s at most
        # (a killed process is listed until the kernel has torn it down, and a dying raylet may start another)
        deadline = time.monotonic() + 10
        while (left := session_pids(head.pid)) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        head.wait(timeout=10)
        shutil.rmtree(temp, ignore_errors=True)
        assert not session_pids(head.pid), "Ray processes left behind"


@pytest.fixture
def fresh_driver():
    """Each eval joins and leaves the cluster itself; a test that failed mid-run must not leave it joined."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


# -- bad input (no cluster needed) --------------------------------------------------------------------------------
def test_ray_missing_names_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    out = tmp_path / "run"
    fails(capsys, ["eval", "aime", "--limit", "1", "--ray", "--out", str(out)], "pip install 'relaxtui[cluster]'")
    assert not out.exists()


def test_unreachable_address_is_one_line_and_writes_nothing(capsys, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "run"
    fails(capsys, ["eval", "aime", "--limit", "1", "--ray", "127.0.0.1:1", "--out", str(out)],
          "--ray 127.0.0.1:1: no Ray cluster answers there")
    assert not out.exists()
    fails(capsys, ["eval", "aime", "--limit", "1", "--ray", "headnode", "--out", str(out)], "give the HOST:PORT")
    fails(capsys, ["eval", "aime", "--ray-actors", "2", "--out", str(out)], "goes with --ray")
    assert not out.exists()


def test_actors_share_their_nodes_gpus():
    from relaxtui.evals.run.ray_executor import node_gpus

    shares = [node_gpus({"Resources": {"GPU": gpus}}, actors) for gpus, actors in [(0, 1), (2, 1), (2, 2), (8, 3),
                                                                                   (2, 3), (1, 2)]]
    assert shares == [0, 2, 1, 2, 0.5, 0.5]


def test_actors_with_k_sequences_take_an_even_share_of_the_queue_up_to_4k():
    pytest.importorskip("ray")
    from relaxtui.evals.run.ray_executor import RayExecutor
    from relaxtui.session import ModelOptions

    def batch(parallel, actors, queued):
        executor = RayExecutor(ModelOptions(parallel=parallel), thinking=None)
        executor.actors = [None] * actors  # type: ignore[list-item]
        return executor._batch_size(queued)

    assert [batch(1, 2, 60), batch(16, 2, 60), batch(16, 1, 600), batch(4, 3, 7), batch(4, 3, 1)] == [1, 30, 64, 3, 1]


# -- a real one-machine cluster -------------------------------------------------------------------------------------
@pytest.mark.model
@pytest.mark.parametrize("parallel", ["1", "2"])
def test_two_actors_give_the_records_of_the_local_runner(capsys, tmp_path, test_model_path, ray_head, fresh_driver,
                                                         parallel):
    """The same records as a local run of the same command; with --parallel 2 each actor decodes 2 sequences at
    once (the local run too), and both halves of the run hand their actors whole batches."""
    local, remote = priced_already(tmp_path / "local"), tmp_path / "ray"
    limit = "2" if parallel == "1" else "4"  # 2 configs x 2 or 4 problems: 2 units per actor, or 4 in 2 waves
    assert main(eval_argv(test_model_path, local, "--limit", limit, "--parallel", parallel)) == 0
    assert main(eval_argv(test_model_path, remote, "--limit", limit, "--parallel", parallel, "--ray", ray_head,
                          "--ray-actors", "2")) == 0
    err = capsys.readouterr().err
    units = 2 * int(limit)
    assert "ray: 2 actor(s) on 1 node(s)" in err and "ETA" not in err  # progress bars only on a terminal
    assert ("2 sequences each" in err) == (parallel == "2")
    by_key = {(r["config_id"], r["problem_id"], r["seed"]): r for r in records(local)}
    got = {(r["config_id"], r["problem_id"], r["seed"]): r for r in records(remote)}
    assert len(got) == len(by_key) == units and got.keys() == by_key.keys()  # same run identity, same config ids
    for key, record in got.items():  # greedy: the same tokens, whichever process made them (batched or not)
        assert record["output"] == by_key[key]["output"] and record["output_tokens"] == by_key[key]["output_tokens"]
    assert json.loads((remote / MEASURED_PROFILE).read_text())["verifier_ar_ms"] > 0  # measured on an actor
    assert main(eval_argv(test_model_path, remote, "--limit", limit, "--parallel", parallel, "--ray", ray_head)) == 0
    assert len(records(remote)) == units and "actor(s)" not in capsys.readouterr().err  # resume: nothing to do


@pytest.mark.model
@pytest.mark.parametrize("parallel", ["1", "2"])
def test_a_killed_actor_loses_and_duplicates_nothing(capsys, monkeypatch, tmp_path, test_model_path, ray_head,
                                                     fresh_driver, parallel):
    """Killed after the first record: with 2 sequences per actor each actor took 4 units (2 waves of 2), so the
    killed one has at least 2 that sent no record; with one, the killed actor may hold a unit or be between two."""
    import ray

    out = priced_already(tmp_path / "ray")
    update = eval_command.ProgressBar.update
    killed = []

    def kill_one_actor_after_the_first_record(self, done):
        update(self, done)
        if not killed:
            name = sorted(ray.util.list_named_actors())[0]
            ray.kill(ray.get_actor(name))
            killed.append(name)

    monkeypatch.setattr(eval_command.ProgressBar, "update", kill_one_actor_after_the_first_record)
    limit = "2" if parallel == "1" else "4"
    assert main(eval_argv(test_model_path, out, "--limit", limit, "--parallel", parallel, "--ray", ray_head,
                          "--ray-actors", "2")) == 0
    err = capsys.readouterr().err
    assert killed and f"ray: actor {killed[0]} on" in err, err
    if parallel == "2":  # the killed actor surely held units that sent no record: they go back on the queue
        assert "back on the queue, 1 actor(s) left" in err, err
    else:  # one sequence each: the actor that sent the first record may be between units when it is killed
        assert "back on the queue, 1 actor(s) left" in err or "it had nothing left to redo, 1 actor(s) left" in err, err
    keys = [(r["config_id"], r["problem_id"], r["seed"]) for r in records(out)]
    assert len(keys) == len(set(keys)) == 2 * int(limit)  # 2 configs x the problems: all there, none twice


@pytest.mark.model
def test_the_mtp_kind_runs_on_an_actor_as_it_does_locally(capsys, tmp_path, tiny, ray_head, fresh_driver):
    """--draft-kind mtp on the tiny hybrid model: the actor builds the verifier's own head like the local run
    (greedy: the same tokens), and the run says it drafted with it."""
    def argv(out):
        return ["eval", "aime", "--limit", "2", "--max-tokens", "8", "--temperature", "0", "-m", str(tiny.qwen35),
                "--draft-kind", "mtp", "--ctx-size", "1024", "--threads", "1", "--out", str(out)]

    local, remote = priced_already(tmp_path / "local"), tmp_path / "ray"
    assert main(argv(local)) == 0
    assert main([*argv(remote), "--ray", ray_head, "--ray-actors", "1"]) == 0
    assert "ray: 1 actor(s) on 1 node(s)" in capsys.readouterr().err
    mine = {(r["config_id"], r["problem_id"]): r for r in records(local)}
    theirs = {(r["config_id"], r["problem_id"]): r for r in records(remote)}
    assert theirs.keys() == mine.keys() and len(mine) == 2
    for key, record in theirs.items():
        assert record["output"] == mine[key]["output"] and record["drafted"] > 0
    assert json.loads((remote / "manifest.json").read_text())["draft_kind"] == "mtp"


@pytest.mark.model
def test_a_lookup_drafters_priced_drafts_run_on_actors_as_they_do_locally(tmp_path, tiny, ray_head, fresh_driver):
    """--draft-kind ngram-cache cuts its drafts by this node's verify prices, which each actor measures (or reads)
    in prepare(), one actor at a time before any decodes; greedy, so the tokens are the verifier's either way."""
    def argv(out):
        return ["eval", "aime", "--limit", "2", "--max-tokens", "16", "--temperature", "0", "-m", str(tiny.dense),
                "--draft-kind", "ngram-cache", "--draft-max", "8", "--ctx-size", "1024", "--threads", "1",
                "--out", str(out)]

    local, remote = priced_already(tmp_path / "local"), tmp_path / "ray"
    assert main(argv(local)) == 0
    assert main([*argv(remote), "--ray", ray_head, "--ray-actors", "2"]) == 0
    mine = {(r["config_id"], r["problem_id"]): r for r in records(local)}
    theirs = {(r["config_id"], r["problem_id"]): r for r in records(remote)}
    assert theirs.keys() == mine.keys() and len(mine) == 2
    for key, record in theirs.items():
        assert record["output"] == mine[key]["output"]
        assert all(0 <= k <= 8 for k in record["draft_lengths"])


@pytest.mark.model
def test_tune_races_on_actors_as_it_does_locally(capsys, tmp_path, test_model_path, ray_head, fresh_driver):
    """`tune --ray`: the strict stage and every batch of the race go to the actors; greedy, the same records and the
    same race (its books, problem by problem) as a local tune of the same command."""
    stem = test_model_path.name.removesuffix(".gguf")

    def argv(out, *extra):
        priced_already(out / stem)
        return ["tune", "aime", "--limit", "4", "--screen-problems", "1", "--max-tokens", "8", "--draft-max", "2",
                "--rule", "cactus:1", "ensemble:0", "--verifier", str(test_model_path), "--drafters",
                str(test_model_path), "--temperature", "0", "--ctx-size", "1024", "--threads", "1", "--budget", "9",
                "--no-screen", "--profile", "memory-bound", "--out", str(out), *extra]

    assert main(argv(tmp_path / "local")) == 0
    assert main(argv(tmp_path / "ray", "--ray", ray_head, "--ray-actors", "2")) == 0
    assert "ray: 2 actor(s) on 1 node(s)" in capsys.readouterr().err
    local, remote = records(tmp_path / "local" / stem), records(tmp_path / "ray" / stem)
    assert sorted((r["config_id"], r["problem_id"], r["output"]) for r in remote) == sorted(
        (r["config_id"], r["problem_id"], r["output"]) for r in local)
    race = {side: json.loads((tmp_path / side / stem / "race.json").read_text()) for side in ("local", "ray")}
    assert race["ray"]["settings"] == race["local"]["settings"] and race["ray"]["spent"] == race["local"]["spent"] <= 9
