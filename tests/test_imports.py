"""``import reasonstate`` needs only attrs and pydantic: no vendor SDK, no HTTP client, no OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys

VENDOR_SDKS = (
    "anthropic",
    "openai",
    "google",
    "google.genai",
    "opentelemetry",
    "jinja2",
    "tokenizers",
    "httpx2",
)


def test_import_reasonstate_with_no_vendor_sdk_installed() -> None:
    code = "; ".join(
        [
            "import sys",
            *(f"sys.modules[{name!r}] = None" for name in VENDOR_SDKS),
            "import reasonstate, reasonstate.policies, reasonstate.adapters, reasonstate.testing",
            "import reasonstate.testing.anthropic, reasonstate.testing.openai_responses",
            "import reasonstate.testing.openai_chat, reasonstate.testing.gemini",
            "import reasonstate.testing.completions",
            "import reasonstate.testing.standalone, reasonstate.cli",
            "from reasonstate.testing import AnthropicEmulator, OpenAIResponsesEmulator, OpenAIChatEmulator",
            "from reasonstate.testing import GeminiEmulator, VLLMCompletionsEmulator, Script, Fault",
            "from reasonstate.testing import RecordedRequest, ModelAction, ToolCallSpec",
            "import reasonstate.export, reasonstate.export.jsonl",
            "loaded = [m for m, v in sys.modules.items() if v is not None]",
            "vendor = ('anthropic', 'openai', 'google', 'opentelemetry', 'jinja2', 'tokenizers')",
            "print(sorted(m for m in loaded if m.split('.')[0] in vendor))",
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_client_of_an_unknown_type_needs_an_explicit_adapter() -> None:
    import pytest

    import reasonstate as rs

    with pytest.raises(rs.InvalidOption, match="or adapter="):
        rs.Session(object(), model="m")


def test_only_the_otel_exporter_imports_opentelemetry() -> None:
    import pathlib
    import re

    import reasonstate

    root = pathlib.Path(reasonstate.__file__).parent
    importing = sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"^\s*(from|import) opentelemetry", path.read_text(), re.MULTILINE)
    )
    assert importing == ["export/otel.py"]
    # and without it installed, the OTel exporter says what to install instead of half-working
    code = "import sys; sys.modules['opentelemetry'] = None; import reasonstate.export.otel"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "pip install 'reasonstate[otel]'" in out.stderr


def test_every_emulator_is_exported_from_reasonstate_testing() -> None:
    import pathlib
    import re

    import reasonstate.testing as testing

    root = pathlib.Path(testing.__file__).parent
    defined = {
        name
        for path in root.glob("*.py")
        if path.name != "_server.py"  # the framework: the lifecycle bases every emulator stands on
        for name in re.findall(r"^class (\w+Emulator)\b", path.read_text(), re.MULTILINE)
        if not name.endswith("FamilyEmulator")  # the OpenAI emulators' shared base, not an emulator
    }
    assert defined == {
        "AnthropicEmulator",
        "BedrockConverseEmulator",
        "GeminiEmulator",
        "GeminiInteractionsEmulator",
        "OpenAIChatEmulator",
        "OpenAIResponsesEmulator",
        "VLLMCompletionsEmulator",
    }
    assert defined <= set(testing.__all__)
    for name in defined:
        doc = getattr(testing, name).__doc__
        assert "base_url" in doc and "reject" in doc, name  # how to point an SDK at it; what it refuses


def test_the_emulators_import_neither_the_adapters_nor_the_session() -> None:
    import pathlib
    import re

    import reasonstate.testing as testing

    for path in pathlib.Path(testing.__file__).parent.glob("*.py"):
        imports = re.findall(r"^\s*(?:from|import) (reasonstate\.\w+)", path.read_text(), re.MULTILINE)
        # reasonstate._extras only names the extra to install when a vendor SDK is missing
        assert set(imports) <= {"reasonstate.testing", "reasonstate._extras"}, (path.name, imports)
