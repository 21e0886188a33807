"""pytest plugin (entry point ``reasonstate``): fixtures giving a test a running emulator and a real vendor
client pointed at it. Vendor SDKs are imported inside the fixtures, so the plugin loads without them."""

from reasonstate.testing._fixtures_anthropic import *  # noqa: F403
from reasonstate.testing._fixtures_openai import *  # noqa: F403
