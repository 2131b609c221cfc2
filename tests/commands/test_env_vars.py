"""Environment variables are input too: each bad value is one UserError naming the variable and its value.

Why: read raw, ``HF_ENDPOINT=http://localhost:99999`` was a ValueError traceback from deep inside huggingface_hub's
imports, ``RELAXTUI_EXTRA_BUFTS=yes`` was silently ignored, and ``RELAXTUI_LLAMA_LOG=0`` turned the log *on*.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from relaxtui import envvars
from relaxtui.cli import main
from relaxtui.errors import UserError


@pytest.mark.parametrize("value", ["http://localhost:99999", "http://h:abc", "http://h:0", "http://h:-1",
                                   "ftp://huggingface.co", "huggingface.co", "http://", "https:///x",
                                   "http://h x", "http://h/\x7f", "https://h/?q=1", "https://h/#top", "http://[::1"])
def test_bad_hub_endpoints_name_the_variable(monkeypatch, value):
    monkeypatch.setenv("HF_ENDPOINT", value)
    with pytest.raises(UserError, match="^HF_ENDPOINT=.* is not a usable URL: ") as caught:
        envvars.hub_endpoint()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("value,expected", [
    ("https://huggingface.co/", "https://huggingface.co"), ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ("https://hf-mirror.com/hub/", "https://hf-mirror.com/hub"), ("", "https://huggingface.co"),
    ("http://[::1]:9000", "http://[::1]:9000"),
])
def test_good_hub_endpoints(monkeypatch, value, expected):
    monkeypatch.setenv("HF_ENDPOINT", value)
    assert envvars.hub_endpoint() == expected


@pytest.mark.parametrize("port", ["99999", "abc"])
def test_models_pull_with_an_invalid_endpoint_port_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys, port):
    monkeypatch.setenv("HF_ENDPOINT", f"http://localhost:{port}")
    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path))
    assert main(["models", "pull", "acme/tiny-GGUF:Q4_K_M"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"relaxtui: error: HF_ENDPOINT=http://localhost:{port} "), err
    assert list(tmp_path.iterdir()) == []


def test_an_hf_model_name_with_an_invalid_endpoint_is_one_line(monkeypatch, tmp_path):
    from relaxtui.models.store import resolve_model

    monkeypatch.setenv("HF_ENDPOINT", "http://h:abc")
    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path))
    with pytest.raises(UserError, match="HF_ENDPOINT=http://h:abc"):
        resolve_model("hf:acme/tiny-GGUF:Q4_K_M")


LONG_LABEL = "a" * 64


@pytest.mark.parametrize("value,problem", [
    (f"http://{LONG_LABEL}.example", "longer than 63"), (f"https://x.{LONG_LABEL}", "longer than 63"),
    ("http://" + ".".join(["a" * 60] * 5), "longer than 253"), ("http://a..b", "empty label"),
    ("http://.example", "empty label"), ("http://a!b.example", "not allowed in a host name"),
    ("http://-a.example", "not allowed in a host name"), ("http://[fe80::zz]", "IPv6"),
    ("http://\u00e4" + "\u00e4" * 70 + ".example", "host"), ("http://\u2603.example", "IDNA"),
])
def test_a_host_llama_cpp_or_the_resolver_would_choke_on_is_one_line(monkeypatch, value, problem):
    """A 64-character label ended in a 62-line UnicodeError from the idna codec (socket.getaddrinfo)."""
    monkeypatch.setenv("HF_ENDPOINT", value)
    with pytest.raises(UserError, match="^HF_ENDPOINT=.* is not a usable URL: ") as caught:
        envvars.hub_endpoint()
    assert problem in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("value", ["http://b\u00fccher.example", "https://hf-mirror.com.", "http://my_host:8080",
                                   "http://[fe80::1]:9000", "http://10.0.0.1", "https://" + "a" * 63 + ".co"])
def test_hosts_that_resolve_are_taken(monkeypatch, value):
    monkeypatch.setenv("HF_ENDPOINT", value)
    assert envvars.hub_endpoint() == value.rstrip("/")


def test_a_long_host_label_through_the_command_line_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_ENDPOINT", f"http://{LONG_LABEL}.example")
    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path))
    assert main(["models", "pull", "acme/tiny-GGUF:Q4_K_M"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: HF_ENDPOINT=") and "Traceback" not in err, err
    assert "longer than 63" in err


@pytest.mark.parametrize("value", ["http://user:secret@huggingface.co", "https://secret@hf-mirror.com/hub",
                                   "http://user:secret@h:99999", "http://user:secret@[::1"])
def test_credentials_in_the_endpoint_are_refused_and_never_shown(monkeypatch, tmp_path, capsys, value):
    """``http://user:secret@host`` had its password printed back in the hub-unreachable line."""
    monkeypatch.setenv("HF_ENDPOINT", value)
    monkeypatch.setenv("RELAXTUI_MODELS", str(tmp_path))
    assert main(["models", "pull", "acme/tiny-GGUF:Q4_K_M"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("relaxtui: error: HF_ENDPOINT=") and "secret" not in err, err
    if "99999" not in value and "[::1" not in value:
        assert "HF_TOKEN" in err


@pytest.mark.parametrize("name", ["RELAXTUI_EXTRA_BUFTS", "RELAXTUI_LLAMA_LOG", "RELAXTUI_NATIVE", "RELAXTUI_WARMUP"])
@pytest.mark.parametrize("value", ["yes", "true", "2", "-1", "on", "0x1", "1 1"])
def test_flags_take_0_or_1_only(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match=f"^{name} must be 0 or 1, not "):
        envvars.flag(name)
    assert envvars.flag(name, strict=False) is False  # for the log callback, which must never raise


@pytest.mark.parametrize("value,expected", [("0", False), ("1", True), (" 1 ", True), ("", None)])
def test_flag_values(monkeypatch, value, expected):
    monkeypatch.setenv("RELAXTUI_EXTRA_BUFTS", value)
    assert envvars.optional_flag("RELAXTUI_EXTRA_BUFTS") is expected
    assert envvars.flag("RELAXTUI_EXTRA_BUFTS") is bool(expected)


def test_the_engine_checks_its_flags(monkeypatch):
    llama = pytest.importorskip("relaxtui.engine.llama")
    monkeypatch.setenv("RELAXTUI_EXTRA_BUFTS", "yes")
    with pytest.raises(UserError, match="RELAXTUI_EXTRA_BUFTS must be 0 or 1, not yes"):
        llama.use_extra_buffers()
    monkeypatch.setenv("RELAXTUI_EXTRA_BUFTS", "0")
    assert llama.use_extra_buffers() is False
    monkeypatch.setattr(llama, "_backend_ready", False)  # the check runs before the backend starts
    monkeypatch.setenv("RELAXTUI_LLAMA_LOG", "verbose")
    with pytest.raises(UserError, match="RELAXTUI_LLAMA_LOG must be 0 or 1, not verbose"):
        llama.init_backend()


def _directory_readers() -> dict[str, object]:
    from relaxtui.evals.tasks.base import data_dir
    from relaxtui.models.store import cache_dir, models_dir

    return {"RELAXTUI_MODELS": models_dir, "RELAXTUI_CACHE": cache_dir, "RELAXTUI_EVALS_DATA": data_dir}


@pytest.mark.parametrize("name", ["RELAXTUI_MODELS", "RELAXTUI_CACHE", "RELAXTUI_EVALS_DATA"])
def test_directories_must_be_directories_or_creatable(monkeypatch, tmp_path, name):
    read = _directory_readers()[name]
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for value, message in [(str(a_file), "is not a directory"),
                           (str(a_file / "sub"), "does not exist and cannot be created"),
                           (str(tmp_path / "dangling"), "is a link to nothing"),
                           ("x" * 5000, "cannot be used")]:
        monkeypatch.setenv(name, value)
        with pytest.raises(UserError, match=f"^{name}=") as caught:
            read()  # type: ignore[operator]
        assert message in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setenv(name, str(tmp_path / "new" / "folder"))  # not there yet, but can be made
    assert str(read()).startswith(str(tmp_path / "new" / "folder"))  # type: ignore[operator]
    monkeypatch.setenv(name, "")  # empty counts as unset
    assert read() is not None  # type: ignore[operator]


def test_an_unwritable_parent_cannot_hold_a_new_directory(monkeypatch, tmp_path):
    import os

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who may write anywhere (root)")
        monkeypatch.setenv("RELAXTUI_MODELS", str(locked / "models"))
        with pytest.raises(UserError, match="cannot be created .*is not writable"):
            envvars.directory("RELAXTUI_MODELS", Path("unused"))
    finally:
        locked.chmod(0o700)


def test_models_list_with_a_file_as_the_models_folder_is_one_line(monkeypatch, tmp_path, capsys):
    a_file = tmp_path / "models"
    a_file.write_text("")
    monkeypatch.setenv("RELAXTUI_MODELS", str(a_file))
    assert main(["models", "list"]) == 2
    err = capsys.readouterr().err
    assert err == f"relaxtui: error: RELAXTUI_MODELS={a_file} is not a directory\n"


def test_values_with_control_characters_stay_on_one_line(monkeypatch):
    monkeypatch.setenv("RELAXTUI_EXTRA_BUFTS", "1\n2")
    with pytest.raises(UserError) as caught:
        envvars.flag("RELAXTUI_EXTRA_BUFTS")
    assert "\n" not in str(caught.value) and "'1\\n2'" in str(caught.value)
