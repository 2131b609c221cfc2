"""Work units on a Ray cluster: the driver owns the queue and the results file, actors own the models.

Each actor loads the verifier/drafter pair once (by path or name, resolved on its own node) and turns work units
into records with the same prompt tokens, config and rule as the local runner, through the same executor: one
unit at a time, or with ``--parallel K`` K units at once in its contexts. The driver hands every idle actor a
batch (one unit, or a share of the queue when the actor holds K sequences), streams records back as they finish
(``ray.wait`` on the actors' generators), and alone appends them to the store, so resume and deduplication stay
in :func:`relaxtui.evals.run.runner.run_units`. A lost actor (its node died, its process crashed, someone killed
it) is dropped and the units of its batch that sent no record go back on the queue for another actor:
at-most-once per actor, at-least-once per unit, and the driver keeps the first record.

Ray is an optional extra (``pip install 'relaxtui[cluster]'``) and is imported only when ``--ray`` is given.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from relaxtui.errors import UserError
from relaxtui.evals.run.plan import EvalPlan
from relaxtui.evals.run.units import WorkUnit
from relaxtui.evals.tasks.base import Sample, Task
from relaxtui.session import ModelOptions

INSTALL_HINT = "pip install 'relaxtui[cluster]'"
CONNECT_TIMEOUT_S = 3.0  # a head node that does not answer a TCP connect in this long is not there
POLL_S = 0.5  # how often the driver looks up from ray.wait to honour a stop request
BATCH_PER_SEQUENCE = 4  # an actor holding K sequences takes up to 4K units per call: its slots refill in place


def require_ray() -> ModuleType:
    """The ray module, or the one line that says which extra to install."""
    try:
        import ray
    except ImportError:
        raise UserError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def check_address(address: str) -> None:
    """Fail fast, before anything is written, when nothing listens at ``HOST:PORT`` (``ray.init`` would retry
    for a minute). ``ray://HOST:PORT`` (Ray Client) and ``auto`` pass; ``auto`` is checked by Ray itself."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--ray {address!r}: give the HOST:PORT that `ray start --head` prints (or no address "
                        "for a local Ray)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"--ray {address}: no Ray cluster answers there ({reason}); start one with "
                        "`ray start --head` or check the address") from None


def connect(address: str | None) -> Callable[[], None]:
    """Join the cluster at ``address`` (``None``: the latest local ``ray start``, else a new local Ray) and
    return the disconnect. Called before the run folder is touched, so a bad address writes nothing."""
    ray = require_ray()
    if address is not None:
        check_address(address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no telemetry prompt or upload from an eval
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ("; if it uses token authentication, set RAY_AUTH_MODE=token (token in RAY_AUTH_TOKEN or "
                "~/.ray/auth_token)" if address and "RAY_AUTH_MODE" not in os.environ else "")
        raise UserError(f"--ray {address or '(local)'}: could not join the Ray cluster: {first}{hint}") from None
    return ray.shutdown


def shipped_options(options: ModelOptions) -> ModelOptions:
    """Model paths that mean the same on an actor: a relative path that exists here becomes absolute (an
    actor's working folder is not ours); a bare name is resolved on each node, in its own ggml_models/."""
    def portable(name: str | None) -> str | None:
        return str(Path(name).absolute()) if name is not None and Path(name).exists() else name
    return replace(options, verifier=portable(options.verifier) or options.verifier, drafter=portable(options.drafter))


class PairActor:
    """Holds one loaded pair on a node (wrapped by ``ray.remote`` at start-up, so ray stays optional)."""

    def __init__(self, options: ModelOptions, thinking: bool | None) -> None:
        from relaxtui.evals.run.executors import local_executor
        from relaxtui.evals.run.pair import sample_tokenizer
        from relaxtui.session import load_pair

        self.error: str | None = None
        self.options = options
        try:
            self.pair = load_pair(options)  # with --parallel K, contexts that hold K sequences
            self.tokenize = sample_tokenizer(self.pair.verifier, thinking=thinking)
            self.executor = local_executor(self.pair.verifier, self.pair.drafter, self.tokenize)  # priced: prepare()
        except UserError as exc:  # e.g. the model is not on this node: said by the driver, with the node
            self.error = str(exc)

    def ready(self) -> tuple[str, str | None]:
        """This node's name, and why the pair did not load (None when it did)."""
        return socket.gethostname(), self.error

    def prepare(self, plan: EvalPlan) -> None:
        """Measure this node's verify prices when the pair cuts its drafter's drafts and the plan drafts, and they
        are not known yet: called on one actor at a time while none decodes (actors that share a node would time
        each other)."""
        if plan.has_spec:
            self.pair.price_drafts()

    def run(self, task: Task, plan: EvalPlan, units: list[WorkUnit]) -> Iterator[dict[str, Any]]:
        """Each unit's record as it finishes (a Ray generator: streamed to the driver one by one), made by the
        local runner's own executor: one at a time, or K at once in this actor's contexts."""
        yield from self.executor.run(task, plan, units, should_stop=lambda: False)

    def measure_profile(self, plan: EvalPlan, sample: Sample) -> str:
        """This node's cost profile as JSON, for the driver to save with the run."""
        from relaxtui.evals.run.pair import plan_profile

        return plan_profile(self.pair, plan, self.tokenize(sample))


@dataclass
class _Actor:
    name: str
    handle: Any  # ray.actor.ActorHandle
    node: str = "?"


class RayExecutor:
    """An :class:`~relaxtui.evals.run.executors.Executor` over Ray actors, one batch of units in flight per actor."""

    def __init__(self, options: ModelOptions, thinking: bool | None, actors: int | None = None,
                 log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)) -> None:
        self.ray = require_ray()
        self.log = log
        self.sequences = options.parallel  # each actor's K
        self._start_args = (shipped_options(options), thinking, actors)
        self.actors: list[_Actor] = []
        self.started = False

    def start(self) -> list[_Actor]:
        """The actors, started on first need: a resumed run with nothing left to do loads no model anywhere."""
        if not self.started:
            self.started = True
            self.actors = self._start(*self._start_args)
        return self.actors

    def _start(self, options: ModelOptions, thinking: bool | None, count: int | None) -> list[_Actor]:
        """One actor per alive node by default, else ``count`` placed round-robin over the nodes. Actors take
        no CPU from Ray's books (llama.cpp sizes its own threads), so they never wait for a free slot; with
        --gpu-layers they share their node's GPUs (older Rays hide GPUs from actors that reserve none)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        nodes = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"])
        if not nodes:
            raise UserError("--ray: the cluster has no live nodes")
        count = count or len(nodes)
        remote = ray.remote(PairActor)
        actors = []
        for i in range(count):
            node = nodes[i % len(nodes)]
            on_node = len(range(i % len(nodes), count, len(nodes)))
            gpus = node_gpus(node, on_node) if options.gpu_layers else 0
            name = f"relaxtui-eval-{os.getpid()}-{i}"
            handle = remote.options(
                name=name, num_cpus=0, num_gpus=gpus, max_restarts=0, max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=True),
            ).remote(options, thinking)
            actors.append(_Actor(name, handle, node.get("NodeManagerAddress", "?")))
        try:
            for actor, (host, error) in zip(actors, ray.get([a.handle.ready.remote() for a in actors]),
                                            strict=True):
                actor.node = host
                if error is not None:
                    raise UserError(f"--ray: on node {host}: {error}")
        except self.ray.exceptions.RayActorError as exc:
            self.actors = actors
            self.close()
            raise UserError(f"--ray: an actor failed to start: {_reason(exc)}") from None
        except BaseException:
            self.actors = actors
            self.close()
            raise
        per_actor = f", {self.sequences} sequences each" if self.sequences > 1 else ""
        self.log(f"ray: {count} actor(s) on {len({a.node for a in actors})} node(s), each with the pair "
                 f"loaded{per_actor}")
        return actors

    def measure_profile(self, plan: EvalPlan, sample: Sample) -> str:
        """The cost profile of the first actor's node (the run's default pricing)."""
        return self.ray.get(self.start()[0].handle.measure_profile.remote(plan, sample))

    def run(self, task: Task, plan: EvalPlan, units: Sequence[WorkUnit],
            should_stop: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        """Yield records as actors finish them. The units of a lost actor's batch that sent no record go back to
        the front of the queue for the others; a stop request returns at once and units in flight are not
        recorded."""
        if not units:
            return
        ray = self.ray
        task_ref, plan_ref = ray.put(task), ray.put(plan)  # shipped once, not with every batch
        queue = deque(units)
        idle = list(self.start())
        for actor in list(idle):  # one at a time, before any decodes: each node's prices measured unloaded
            try:
                ray.get(actor.handle.prepare.remote(plan_ref))
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
                idle.remove(actor)
                self._lose(actor, [], exc)
        if not idle:
            raise UserError(f"every Ray actor was lost; {len(queue)} unit(s) not run — the records so far are kept, "
                            "run the same command to resume")
        in_flight: dict[Any, tuple[_Actor, dict[tuple[str, str, int], WorkUnit]]] = {}  # generator -> batch

        def submit() -> None:
            size = self._batch_size(len(queue))  # the share is worked out once, for every idle actor alike
            while queue and idle:
                actor = idle.pop(0)
                batch = [queue.popleft() for _ in range(min(len(queue), size))]
                in_flight[actor.handle.run.remote(task_ref, plan_ref, batch)] = (actor, {u.key: u for u in batch})

        submit()
        while in_flight:
            if should_stop():
                return
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=POLL_S)
            for stream in ready:
                actor, pending = in_flight[stream]
                try:
                    record = ray.get(next(stream))
                except StopIteration:  # the batch is done: the actor takes the next one
                    del in_flight[stream]
                    idle.append(actor)
                    submit()
                    continue
                except ray.exceptions.RayTaskError as exc:  # a unit itself failed on a healthy actor
                    cause = getattr(exc, "cause", None) or exc
                    labels = [f"{u.sample.id} seed {u.seed} ({u.point.label})" for u in pending.values()]
                    more = f" and {len(labels) - 3} more" if len(labels) > 3 else ""
                    raise UserError(f"--ray: a unit failed on {actor.node} (one of: {', '.join(labels[:3])}{more}): "
                                    f"{_reason(cause)}") from None
                except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as exc:
                    # the actor died, or a large record died with its node: redo what sent no record
                    del in_flight[stream]
                    self._lose(actor, list(pending.values()), exc)
                    queue.extendleft(reversed(pending.values()))
                    if queue and not idle and not in_flight:
                        raise UserError(f"every Ray actor was lost; {len(queue)} unit(s) not run — the records so "
                                        "far are kept, run the same command to resume") from None
                    submit()
                    continue
                pending.pop((record["config_id"], record["problem_id"], record["seed"]), None)
                yield record

    def _batch_size(self, queued: int) -> int:
        """Units per call. One-sequence actors take one at a time (a lost actor costs one unit, and the queue
        stays even); an actor with K sequences takes an even share of the queue, up to 4K, so its finished slots
        refill in place and the other actors still get work."""
        if self.sequences == 1:
            return 1
        share = math.ceil(queued / max(1, len(self.actors)))
        return max(1, min(share, BATCH_PER_SEQUENCE * self.sequences))

    def _lose(self, actor: _Actor, units: list[WorkUnit], exc: BaseException) -> None:
        self.actors.remove(actor)
        self.ray.kill(actor.handle)  # an actor that was only unreachable must not come back half-way
        if not units:  # it died after sending every record of its batch
            what = "it had nothing left to redo"
        elif len(units) == 1:
            what = f"its unit {units[0].sample.id} seed {units[0].seed} ({units[0].point.label}) goes back on the queue"
        else:
            what = f"its {len(units)} unfinished units go back on the queue"
        self.log(f"ray: actor {actor.name} on {actor.node} lost ({_reason(exc)}); {what}, "
                 f"{len(self.actors)} actor(s) left")

    def close(self) -> None:
        """Release every actor (and with it the models); the connection is the caller's to close."""
        for actor in self.actors:
            try:
                self.ray.kill(actor.handle)
            except Exception:  # noqa: BLE001 - already gone is fine
                pass
        self.actors = []


def node_gpus(node: dict[str, Any], actors_on_node: int) -> float:
    """Each actor's share of its node's GPUs: whole GPUs while there are enough, else an even fraction of one."""
    gpus = int(node.get("Resources", {}).get("GPU", 0))
    if gpus == 0:
        return 0
    return gpus // actors_on_node if actors_on_node <= gpus else 1 / math.ceil(actors_on_node / gpus)


def _reason(exc: BaseException) -> str:
    """The first line of a Ray error, without its traceback."""
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
