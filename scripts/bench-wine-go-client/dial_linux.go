package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"time"

	fsapi "github.com/kubernetes-csi/csi-proxy/client/api/filesystem/v1"
	"google.golang.org/grpc"
)

var socketPath = flag.String("socket", "", "the daemon's filesystem v1 Unix socket (<socket-dir>/csi-proxy-filesystem-v1.sock)")

// checkFlags checks the flags only Linux has.
func checkFlags() error {
	if *socketPath == "" {
		return errors.New("-socket is required on Linux")
	}
	return nil
}

// dial connects to the Unix socket with grpc-go and wraps the connection in upstream's generated
// FilesystemClient, the stub its Windows wrapper delegates to (the wrapper itself needs go-winio).
func dial() (*conn, error) {
	// Like the Windows wrapper's probe of the pipe: fail at once while the daemon has not bound
	// the socket yet, rather than inside grpc's reconnect backoff.
	probe, err := net.Dial("unix", *socketPath)
	if err != nil {
		return nil, err
	}
	probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cc, err := grpc.DialContext(ctx, "unix://"+*socketPath, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		return nil, err
	}
	return &conn{fs: fsapi.NewFilesystemClient(cc), cc: cc, close: cc.Close}, nil
}

// putMarker has nothing to mark on Linux: the MARK line on stdout is the marker.
func putMarker(edge, phase string) error { return nil }
