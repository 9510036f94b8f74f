"""A plug-in module that fails while importing (the plug-in tests check the error names it)."""

raise RuntimeError("this plug-in is broken on purpose")
