"""Shared settings of the language bindings."""

# Flags for compiling SWIG-generated wrappers: only what the module exports (the language's entry
# points) is visible, and warnings in code SWIG writes are not ours to fix.
WRAPPER_COPTS = [
    "-fvisibility=hidden",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]
