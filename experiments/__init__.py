"""Research diagnostics kept out of the product path (``experiments/README.md``): each a plug-in or a script that
uses only empo2's public API, exactly as a user's own plug-in would. Nothing here is imported by ``empo2``."""
