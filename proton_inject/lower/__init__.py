"""From instrumented TTGIR to a binary: lowering options, IR probes, Proton's passes, our direct
lowering, inlining of callees and the CPU compile check. Never touches a GPU.
"""
