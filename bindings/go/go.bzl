"""Builds Go programs against the Go binding (no rules_go: a genrule runs the Go toolchain)."""

# The module's files: DEST (inside the module) -> label.
MODULE_FILES = {
    "LICENSE": "//:LICENSE",
    "go.mod": "//bindings/go:go.mod",
    "doc.go": "//bindings/go:doc.go",
    "errors.go": "//bindings/go:errors.go",
    "linear.go": "//bindings/go:linear.go",
    "loader.go": "//bindings/go:loader.go",
    "model.go": "//bindings/go:model.go",
    "plan.go": "//bindings/go:plan.go",
    "run.go": "//bindings/go:run.go",
    "schedule.go": "//bindings/go:schedule.go",
    "tensor.go": "//bindings/go:tensor.go",
    "trainer.go": "//bindings/go:trainer.go",
    "internal/core/cgo.go": "//bindings/go:internal/core/cgo.go",
    "internal/core/core.go": "//bindings/go:core.go",
    "internal/core/core_wrap.cxx": "//bindings/go:core_wrap.cxx",
    "internal/core/core_wrap.h": "//bindings/go:core_wrap.h",
    "internal/core/include/bindings/pipeforge_core.h": "//bindings:pipeforge_core.h",
}

def pipeforge_go(name, out, mode, files = {}, **kwargs):
    """A genrule that assembles the module plus `files` (DEST -> label) and runs go_module.sh.

    mode: "test" (a `go test -c` binary of the module's root package), "build:PKG" (go build ./PKG),
    "check" (build every package, vet the public one), "tar" (the module as a tarball) or "proxy"
    (a tarball of a module proxy serving it: GOPROXY=file://DIR once unpacked in DIR).
    """
    all_files = dict(MODULE_FILES)
    all_files.update(files)
    labels = {label: None for label in all_files.values()}.keys()
    native.genrule(
        name = name,
        srcs = list(labels) + [
            "//c_api:VERSION",
            "//c_api:libpipeforge.so.1",
            "//c_api:pipeforge.h",
        ],
        outs = [out],
        cmd = "$(location //bindings/go:go_module.sh) %s $@ $(location //c_api:libpipeforge.so.1) $(location //c_api:pipeforge.h) $(location //c_api:VERSION) %s" % (
            mode,
            " ".join(["%s=$(location %s)" % (dest, label) for dest, label in sorted(all_files.items())]),
        ),
        tools = [
            "//bindings/go:go_module.sh",
            "//tools/packaging:go_proxy.py",
            "//tools/packaging:pkg_config.sh",
        ],
        **kwargs
    )
