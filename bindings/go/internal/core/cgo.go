// Package core is the SWIG-generated layer of the Go binding (core.go and core_wrap.cxx are
// generated from bindings/go/pipeforge_go.i when the module is assembled). Use package pipeforge.
package core

// The headers travel with the module (include/c_api/pipeforge.h, include/bindings/pipeforge_core.h);
// libpipeforge.so is found through CGO_LDFLAGS (-L) at build time and the run path or
// LD_LIBRARY_PATH at run time.

// #cgo CXXFLAGS: -std=c++17 -I${SRCDIR}/include
// #cgo LDFLAGS: -lpipeforge
import "C"
