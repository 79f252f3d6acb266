#!/usr/bin/env python3
"""Regenerate ttgir_samples/thirdparty/: TTGIR of other people's kernels, compiled on the CPU.

Kernels of Liger-Kernel 0.8.5 and flash-linear-attention (fla-core 0.6.0), both pinned in the
`dev` extra, and Inductor-generated kernels kept in ttgir_samples/sources/inductor/ (generated
by torch.compile on an H100, PyTorch 2.11). The specializations of the Liger and Inductor
kernels are the ones real launches used there (`proton-inject dump -- python ...` wrote an
`aot_command` per kernel; their launch hashes on cuda:90 are in SOURCES.json and
tests/unit/dump/test_thirdparty_samples.py checks that our AOT hash equals them). The fla ones follow
their launch sites (chunk size 64, 4 heads), one autotune config each.

For each target the TTGIR goes to ttgir_samples/thirdparty/<target>/<name>.ttgir, with
absolute paths in loc(...) made relative to site-packages / the repository, and
ttgir_samples/thirdparty/SOURCES.json records package, version, module, kernel, signature,
constexprs and options of each. The IR is compiler output; the kernels' source stays their
authors' (Liger-Kernel: BSD-2-Clause, fla: MIT) and is not copied here.

    python scripts/make_thirdparty_samples.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from make_samples import TARGETS, target_dir  # noqa: E402

from proton_inject.errors import UserError  # noqa: E402
from proton_inject.formats.files import write_atomic  # noqa: E402

OUT = ROOT / "ttgir_samples" / "thirdparty"
INDUCTOR = "ttgir_samples/sources/inductor"
LIGER = ("liger-kernel", "0.8.5")
FLA = ("fla-core", "0.6.0")
INDUCTOR_PKG = ("torch (Inductor output)", "2.11.0")

# name, (package, version), module or repo file, kernel, signature, constexprs, warps, stages,
# cuda:90 launch hash (None where no GPU launch was recorded)
SPECS = [
    ("rms_norm_fwd", LIGER, "liger_kernel.ops.rms_norm", "_rms_norm_forward_kernel",
     "Y_ptr=*bf16,Y_row_stride=i32:16,X_ptr=*bf16,X_row_stride=i32:16,W_ptr=*bf16,"
     "RSTD_ptr=*fp32,n_cols=i32:16,eps=fp32,offset=fp32",
     ["W_row_stride=1", "RSTD_row_stride=1", "casting_mode=0", "elementwise_affine=true",
      "BLOCK_SIZE=256"], 4, 3, "X3JXHD3AIP3DAE5IATPADGYQNVKJIRWAZS2T3T4OUGF5CMMZARTQ"),
    ("rms_norm_bwd", LIGER, "liger_kernel.ops.rms_norm", "_rms_norm_backward_kernel",
     "dY_ptr=*bf16,dY_row_stride=i32:16,dX_ptr=*bf16,dX_row_stride=i32:16,X_ptr=*bf16,"
     "X_row_stride=i32:16,W_ptr=*bf16,RSTD_ptr=*fp32,dW_ptr=*fp32,dW_row_stride=i32:16,"
     "n_rows=i32:16,n_cols=i32:16,offset=fp32",
     ["X_dtype=tl.bfloat16", "W_row_stride=1", "RSTD_row_stride=1", "rows_per_program=1",
      "casting_mode=0", "elementwise_affine=true", "BLOCK_SIZE=256", "COMPUTE_DW=true"], 4, 3,
     "ULIB5XQM3TNSERJOKTXQXUWVOD2D4MGS4XHD4OLBW24EB7ZAXIOQ"),
    ("layer_norm_fwd", LIGER, "liger_kernel.ops.layer_norm", "_layer_norm_forward_kernel",
     "Y_ptr=*bf16,Y_row_stride=i32:16,X_ptr=*bf16,X_row_stride=i32:16,W_ptr=*bf16,B_ptr=*bf16,"
     "Mean_ptr=*fp32,RSTD_ptr=*fp32,n_cols=i32:16,eps=fp32",
     ["W_row_stride=1", "B_row_stride=1", "Mean_row_stride=1", "RSTD_row_stride=1",
      "BLOCK_SIZE=256"], 4, 3, "DNW4OH5WJDPKAS7474FNGCXTWJCVLGLIVBDM7XMDJVZYMS422R7Q"),
    ("layer_norm_bwd", LIGER, "liger_kernel.ops.layer_norm", "_layer_norm_backward_kernel",
     "X_ptr=*bf16,stride_x=i32:16,W_ptr=*bf16,Mean_ptr=*fp32,RSTD_ptr=*fp32,DX_ptr=*bf16,"
     "stride_dx=i32:16,DW_ptr=*fp32,stride_dw=i32:16,DB_ptr=*fp32,stride_db=i32:16,"
     "DY_ptr=*bf16,stride_dy=i32:16,n_rows=i32:16,n_cols=i32:16",
     ["stride_mean=1", "stride_rstd=1", "rows_per_program=1", "BLOCK_SIZE=256",
      "COMPUTE_DW=true", "COMPUTE_DB=true"], 4, 3,
     "QPX74PONXVEYKOWB6K2VM3VPFM3DIZAKEURGGAZVK6ILECHXTMEQ"),
    ("swiglu_fwd", LIGER, "liger_kernel.ops.swiglu", "_swiglu_forward_kernel",
     "a_ptr=*bf16,b_ptr=*bf16,c_ptr=*bf16,stride=i32:16,gate_multiplier=fp32",
     ["n_cols=1024", "BLOCK_SIZE=1024"], 4, 3,
     "BHRZJCEPWPFOXCTD7BK4ANBUBIWMW5ADOKRLD2XJIVZAEFVESBSA"),
    ("swiglu_bwd", LIGER, "liger_kernel.ops.swiglu", "_swiglu_backward_kernel",
     "dc_ptr=*bf16,a_ptr=*bf16,b_ptr=*bf16,stride=i32:16,gate_multiplier=fp32",
     ["n_cols=1024", "BLOCK_SIZE=1024"], 4, 3,
     "S546ZIASD75MWKTXYEI6O7CEMZ64SKTQLS3ASKZRBOKHXE2DDA5Q"),
    ("rope_fwd", LIGER, "liger_kernel.ops.rope", "_triton_rope",
     "q_ptr=*bf16,q_row_stride=i32:16,k_ptr=*bf16,k_row_stride=i32:16,cos=*bf16,"
     "cos_row_stride=i32:16,sin=*bf16,sin_row_stride=i32:16,sl=i32:16",
     ["bs=2", "cos_bs=1", "n_qh=4", "n_kh=4", "hd=64", "pad_n_qh=4", "pad_n_kh=4", "pad_hd=64",
      "pad_rd=64", "rd=64", "BLOCK_SIZE=4", "BACKWARD_PASS=false"], 4, 3,
     "DASB7VKO7PASK2TZWMUCDOHDZ64FHLOJVRA4CFE6TYL24UTWPJBQ"),
    ("rope_bwd", LIGER, "liger_kernel.ops.rope", "_triton_rope",
     "q_ptr=*bf16,q_row_stride=i32:16,k_ptr=*bf16,k_row_stride=i32:16,cos=*bf16,"
     "cos_row_stride=i32:16,sin=*bf16,sin_row_stride=i32:16,sl=i32:16",
     ["bs=2", "cos_bs=1", "n_qh=4", "n_kh=4", "hd=64", "pad_n_qh=4", "pad_n_kh=4", "pad_hd=64",
      "pad_rd=64", "rd=64", "BLOCK_SIZE=4", "BACKWARD_PASS=true"], 4, 3,
     "V2U3S3F3GXQHVKWMGG4JADQAR5JADS4CLAFVUNHDGKF66NEGYELA"),
    ("cross_entropy", LIGER, "liger_kernel.ops.cross_entropy", "liger_cross_entropy_kernel",
     "X_ptr=*fp32,X_stride=i32:16,Y_ptr=*i64,loss_ptr=*fp32,token_accuracy_stride=i32:16,"
     "predicted_tokens_stride=i32:16,n_cols=i32:16,n_non_ignore=i32,sum_non_ignore_weight=i32,"
     "weight_sum=fp32,ignore_index=i32",
     ["Y_stride=1", "weight_ptr=None", "z_loss_ptr=None", "loss_stride=1",
      "token_accuracy_ptr=None", "predicted_tokens_ptr=None", "lse_square_scale=0.0",
      "label_smoothing=0.0", "reduction=mean", "softcap=None", "RETURN_Z_LOSS=false",
      "RETURN_TOKEN_ACCURACY=false", "RETURN_PREDICTED_TOKENS=false", "BLOCK_SIZE=1024",
      "HAS_WEIGHT=false", "HAS_SOFTCAPPING=false", "HAS_GRADIENTS=true"], 32, 3,
     "N7LNTIBCKMSZMONVVL4UWWYOA55FHPBFRFPVJ2QS22VMKBSKQZTQ"),
    ("fused_linear_cross_entropy", LIGER, "liger_kernel.ops.cross_entropy",
     "liger_cross_entropy_kernel",  # what LigerFusedLinearCrossEntropy launches, on bf16 logits
     "X_ptr=*bf16,X_stride=i32:16,Y_ptr=*i64,loss_ptr=*fp32,token_accuracy_stride=i32:16,"
     "predicted_tokens_stride=i32:16,n_cols=i32:16,n_non_ignore=i32,sum_non_ignore_weight=i32,"
     "weight_sum=fp32,ignore_index=i32",
     ["Y_stride=1", "weight_ptr=None", "z_loss_ptr=None", "loss_stride=1",
      "token_accuracy_ptr=None", "predicted_tokens_ptr=None", "lse_square_scale=0.0",
      "label_smoothing=0.0", "reduction=mean", "softcap=None", "RETURN_Z_LOSS=false",
      "RETURN_TOKEN_ACCURACY=false", "RETURN_PREDICTED_TOKENS=false", "BLOCK_SIZE=1024",
      "HAS_WEIGHT=false", "HAS_SOFTCAPPING=false", "HAS_GRADIENTS=true"], 32, 3,
     "N6GV7JUQCRZAUSUE7SMJXRHVHI3TIOKKA3LAJ4HVM74JV4MFIE3Q"),
    ("fla_chunk_local_cumsum", FLA, "fla.ops.utils.cumsum", "chunk_local_cumsum_scalar_kernel",
     "s=*fp32,o=*fp32,scale=none,cu_seqlens=none,chunk_indices=none,T=i32",
     ["B=2", "H=4", "BT=64", "REVERSE=false", "HAS_SCALE=false", "IS_VARLEN=false"], 4, 3, None),
    ("fla_solve_tril_merge_32", FLA, "fla.ops.utils.solve_tril",
     "merge_16x16_to_32x32_inverse_kernel",
     "A=*fp32,Ai=*fp32,cu_seqlens=none,chunk_indices=none,T=i32",
     ["H=4", "BT=32", "USE_TMA=false", "IS_VARLEN=false", "DOT_PRECISION=ieee"], 4, 2, None),
    ("fla_chunk_fwd_o", FLA, "fla.ops.common.chunk_o", "chunk_fwd_kernel_o",
     "q=*bf16,k=*bf16,v=*bf16,h=*bf16,g=*fp32,g_gamma=none,o=*bf16,cu_seqlens=none,"
     "chunk_indices=none,scale=fp32,T=i32",
     ["H=4", "HV=4", "K=64", "V=64", "BT=64", "BK=64", "BV=64", "USE_G=true",
      "USE_G_GAMMA=false", "STATE_V_FIRST=false", "IS_VARLEN=false"], 4, 3, None),
    ("inductor_pointwise_gelu_sigmoid", INDUCTOR_PKG,
     f"{INDUCTOR}/triton_poi_fused_gelu_mul_sigmoid_0.py", "triton_poi_fused_gelu_mul_sigmoid_0",
     "in_ptr0=*fp32,out_ptr0=*fp32,xnumel=i32:16", ["XBLOCK=256"], 4, 1,
     "45HZZKSAH3RH7PRSQIRYU335SWLPTKDCTAZTUVLZTN77RGP7WRAQ"),
    ("inductor_layer_norm_softmax", INDUCTOR_PKG,
     f"{INDUCTOR}/triton_per_fused__softmax_amax_ge_mul_native_layer_norm_neg_scalar_tensor_"
     "sub_where_0.py",
     "triton_per_fused__softmax_amax_ge_mul_native_layer_norm_neg_scalar_tensor_sub_where_0",
     "in_ptr0=*fp32,out_ptr4=*fp32,xnumel=i32:16,r0_numel=i32:16", ["XBLOCK=1"], 2, 1,
     "4TAFLQLVBSPC3O6AG3CUBZXFVN36TO4LULXKECC3SUMBALG4BPTQ"),
    ("inductor_rmsnorm_residual", INDUCTOR_PKG,
     f"{INDUCTOR}/triton_per_fused_add_mean_mul_pow_rsqrt_0.py",
     "triton_per_fused_add_mean_mul_pow_rsqrt_0",
     "in_ptr0=*fp32,in_ptr1=*fp32,in_ptr2=*fp32,out_ptr0=*fp32,out_ptr2=*fp32,xnumel=i32:16,"
     "r0_numel=i32:16", ["XBLOCK=1"], 2, 1, "IFZ74J5HYWNGDR2YMOOPY4I4JJFAAB6LUR47YD5GEI7ILD4KAH4Q"),
    ("inductor_mlp_gelu", INDUCTOR_PKG, f"{INDUCTOR}/triton_poi_fused_gelu_0.py",
     "triton_poi_fused_gelu_0", "in_ptr0=*fp32,out_ptr0=*fp32,xnumel=i32:16", ["XBLOCK=256"], 4,
     1, "47QMOFWVKLCEMAPBUOZNKIX3H47ZH2WX5PMNDUWGNITPHZYTZTUA"),
]


def allow_inductor_import() -> None:
    """Inductor's generated files call set_driver_to_gpu() on import, which needs a GPU; the
    AOT compile names its target itself, so make that call a no-op here."""
    from torch._inductor.runtime import triton_helpers

    triton_helpers.set_driver_to_gpu = lambda: None


def relativize_locs(text: str) -> str:
    """Absolute paths in loc(...) made relative: installed packages to site-packages (checked
    first: a virtual environment may live inside the repository), then the repository."""
    import re

    import triton

    prefixes = [str(Path(triton.__file__).resolve().parent.parent) + "/", str(ROOT) + "/"]

    def fix(m: re.Match) -> str:
        path = m.group(1)
        for prefix in prefixes:
            if path.startswith(prefix):
                return f'loc("{path[len(prefix):]}"'
        return m.group(0)

    return re.sub(r'loc\("(/[^"]*)"', fix, text)


def source_path(module: str) -> Path:
    """A spec's source file: a repository file, or the installed module's file."""
    if module.endswith(".py"):
        return ROOT / module
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{module}: not installed; pip install -e '.[dev]' (pinned versions)")
    return Path(spec.origin)


def entry(spec) -> dict:
    name, (pkg, version), module, kernel, sig, cx, warps, stages, launch = spec
    return {"name": name, "package": pkg, "version": version, "module": module, "kernel": kernel,
            "signature": sig, "constexprs": cx, "num_warps": warps, "num_stages": stages,
            "launch_hash_cuda90": launch}


def main() -> int:
    from proton_inject.dump.aot import compile_aot
    from proton_inject.dump.signature import parse_constexprs

    allow_inductor_import()
    t0 = time.perf_counter()
    skipped, written = [], 0
    for spec in SPECS:
        e = entry(spec)
        path = source_path(e["module"])
        for target in TARGETS:
            try:
                r = compile_aot(path, e["kernel"], e["signature"], parse_constexprs(e["constexprs"]),
                                target, e["num_warps"], e["num_stages"])
            except UserError as err:
                skipped.append(f"{e['name']} for {target}: {str(err).splitlines()[0][-200:]}")
                continue
            out = OUT / target_dir(target) / f"{e['name']}.ttgir"
            write_atomic(out, relativize_locs(r.ttgir))
            written += 1
    sources = {"about": __doc__.split("\n\n")[0], "skipped": skipped,
               "kernels": [entry(s) for s in SPECS]}
    write_atomic(OUT / "SOURCES.json", json.dumps(sources, indent=1) + "\n")
    for s in skipped:
        print(f"skipped: {s}")
    print(f"{written} files, {len(skipped)} skipped, {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
