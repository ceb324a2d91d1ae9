"""Pages of the selection app, one module per page family."""
