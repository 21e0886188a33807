"""Anthropic emulator fixtures (filled in by the Anthropic emulator)."""
