"""Getting TTGIR out of a program or a kernel: signatures and constexprs, AOT compiles, the
program dump and the autotuners' choices made on the way.
"""
