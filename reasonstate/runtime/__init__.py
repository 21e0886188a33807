"""The runtime ``Session.run`` drives: tool dispatch and the storm breaker (:mod:`.dispatch`), tool-call
repair (:mod:`.repair`) and folding a long history (:mod:`.fold`), pure over values.

It sits below the adapters and the engine (pyproject.toml ``[tool.importlinter]``): what it needs of a
session, an adapter or a request it takes as arguments typed by protocols, never by importing them.
:mod:`.commit` (one model call's answer committed to the layers) is the engine's step and moves into
``reasonstate.engine``.
"""
