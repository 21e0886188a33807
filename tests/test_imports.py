"""``import reasonstate`` needs only attrs, pydantic and httpx2: no vendor SDK, no OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys

VENDOR_SDKS = ("anthropic", "openai", "google", "google.genai", "opentelemetry", "jinja2", "tokenizers")


def test_import_reasonstate_with_no_vendor_sdk_installed() -> None:
    code = "; ".join(
        [
            "import sys",
            *(f"sys.modules[{name!r}] = None" for name in VENDOR_SDKS),
            "import reasonstate, reasonstate.policies, reasonstate.adapters, reasonstate.testing",
            "import reasonstate.testing.anthropic, reasonstate.testing.openai_responses",
            "import reasonstate.testing.openai_chat",
            "import reasonstate.export, reasonstate.export.jsonl",
            "loaded = [m for m, v in sys.modules.items() if v is not None]",
            "print(sorted(m for m in loaded if m.split('.')[0] in ('anthropic', 'openai', 'opentelemetry')))",
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
