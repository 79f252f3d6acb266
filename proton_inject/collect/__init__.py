"""Running the user's program with instrumented kernels: the session, compiler hooks, tuning,
profile buffers, CUDA graphs, and the raw files and run.json it writes.
"""
