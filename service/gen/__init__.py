"""Generated code; regenerate with ``python -m dra_solver.service.protogen``."""
