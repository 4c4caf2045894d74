package main

import (
	"syscall"
	"unsafe"

	fsclient "github.com/kubernetes-csi/csi-proxy/client/groups/filesystem/v1"
)

// checkFlags has nothing to check: the pipe is upstream's default for filesystem v1.
func checkFlags() error { return nil }

// dial connects through upstream's filesystem v1 wrapper, as drivers do: it dials the default
// pipe once to see that it exists, then lets grpc dial it again with go-winio.
func dial() (*conn, error) {
	c, err := fsclient.NewClient()
	if err != nil {
		return nil, err
	}
	return &conn{fs: c, close: c.Close}, nil
}

// CreateNamedPipeW through the standard library, so the client builds against any upstream
// tag's vendored golang.org/x/sys (v1.1.2's has no CreateNamedPipe).
var createNamedPipe = syscall.NewLazyDLL("kernel32.dll").NewProc("CreateNamedPipeW")

const pipeAccessDuplex = 3 // PIPE_ACCESS_DUPLEX; dwPipeMode 0 is PIPE_TYPE_BYTE

// putMarker puts a marker into the wineserver trace: creating a named pipe is a request carrying
// its name, seen in the order the server handled it.
func putMarker(edge, phase string) error {
	name := `\\.\pipe\csi-proxy-bench-mark-` + edge + "-" + phase
	p, err := syscall.UTF16PtrFromString(name)
	if err != nil {
		return err
	}
	h, _, e := createNamedPipe.Call(uintptr(unsafe.Pointer(p)), pipeAccessDuplex, 0, 1, 0, 0, 0, 0)
	if syscall.Handle(h) == syscall.InvalidHandle {
		return e
	}
	return syscall.CloseHandle(syscall.Handle(h))
}
