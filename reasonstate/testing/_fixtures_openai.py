"""OpenAI emulator fixtures (filled in by the OpenAI emulators)."""
