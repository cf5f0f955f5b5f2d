"""Generated code; regenerate with ``python -m service.protogen``."""
