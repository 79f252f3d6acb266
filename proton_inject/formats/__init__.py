"""Every file proton-inject reads or writes: its layout, its reader and writer, its checks.

No torch, no Triton here; each format has one owner module.
"""
