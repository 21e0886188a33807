"""pytest plugin: fixtures giving a test a running emulator and a real vendor client pointed at it."""
