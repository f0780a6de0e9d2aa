"""The message core: routing between processes, ports, futures, the wire
protocol. It knows nothing of meshes, actors or supervision."""
