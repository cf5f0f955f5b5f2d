"""Generated code; regenerate with ``python -m kubeletplugin.protogen``."""
