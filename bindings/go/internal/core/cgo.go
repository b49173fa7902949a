// Package core is the SWIG-generated layer of the Go binding (core.go and core_wrap.cxx are
// generated from bindings/go/pipeforge_go.i when the module is assembled). Use package pipeforge.
package core

// pkg-config finds the installed C library (tools/install.sh --prefix DIR puts pipeforge.pc in
// DIR/lib/pkgconfig: set PKG_CONFIG_PATH to it): the header pipeforge.h, -lpipeforge and, for a
// prefix the dynamic loader does not search, a run path. The C++ layer the wrapper compiles in
// (bindings/pipeforge_core.h) travels with the module, under include/.

// #cgo pkg-config: pipeforge
// #cgo CXXFLAGS: -std=c++17 -I${SRCDIR}/include
import "C"
