"""What users call: actors, endpoints, meshes, context, and the
orchestration of proc meshes and actors behind them."""
