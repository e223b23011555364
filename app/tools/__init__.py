"""Tools: kinds, definitions, calls, results, executors and their registry."""
