"""Generated code; regenerate with ``python -m dra_solver.kubeletplugin.protogen``."""
