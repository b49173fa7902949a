"""cuda_library: .cu files compiled by nvcc into position-independent objects, linked by cc_library.

No rules_cuda (nothing can be fetched offline): one genrule per .cu file runs the toolkit's nvcc
(/usr/local/cuda/bin/nvcc) with the flags below, and a cc_library links the objects together with
the plain C++ sources. Compiles and links on machines without a GPU; code must check for a device
at run time (see docs/BUILD.md).
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# sm_90 (H100/H200) machine code plus compute_90 PTX that newer GPUs JIT-compile.
NVCC_FLAGS = " ".join([
    "-O3",
    "-std=c++17",
    "-Xcompiler -fPIC",
    "--expt-relaxed-constexpr",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
    "-I.",
])

def cuda_library(name, cu_srcs, srcs = [], hdrs = [], cu_hdrs = [], deps = [], copts = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc.

    Args:
      name: the cc_library's name.
      cu_srcs: .cu files, each compiled on its own.
      srcs: plain C++ sources and private headers (compiled by the C++ toolchain).
      hdrs: public headers.
      cu_hdrs: extra headers the .cu files include (labels of files, from anywhere in the repo).
      deps: cc_library dependencies (add "@cuda//:cudart", "@cuda//:cublas", "@cuda//:nccl" as needed).
      copts: extra C++ options for srcs.
      **kwargs: passed to cc_library (visibility, testonly, ...).
    """
    objects = []
    for src in cu_srcs:
        stem = src[:-len(".cu")] if src.endswith(".cu") else src
        obj_rule = name + "_" + stem.replace("/", "_") + "_cu"
        native.genrule(
            name = obj_rule,
            srcs = [src] + hdrs + cu_hdrs + srcs,
            outs = [name + "_objs/" + stem + ".pic.o"],
            cmd = NVCC + " " + NVCC_FLAGS + " -I$(GENDIR) -c $(location " + src + ") -o $@",
            **({"testonly": kwargs["testonly"]} if "testonly" in kwargs else {})
        )
        objects.append(":" + obj_rule)
    native.cc_library(
        name = name,
        srcs = objects + srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        copts = copts,
        **kwargs
    )
