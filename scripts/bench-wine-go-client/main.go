// Command bench-client is the Go twin of csi-proxy's Windows bench client
// (crates/bench/src/windows.rs), run under wine by scripts/bench-wine.sh --client go.
//
// It calls filesystem v1 PathExists the way a CSI driver does: through upstream csi-proxy's
// generated client (client/groups/filesystem/v1) over go-winio's pipe dialer, with grpc-go,
// which writes a unary call's HEADERS and DATA frames together where our Rust client does not.
// The script copies this file into an extracted upstream source tree (cmd/bench-client) and
// builds it there with `go build -mod=vendor`, so it uses upstream's vendored grpc and stubs;
// nothing of upstream is kept in this repository.
//
// Phases, markers and output are those of the Rust client: warm-up, then sequential calls on
// one connection ("PathExists"), then N connections making a fixed number of calls each
// ("PathExists<N>"). Around each phase it creates a named pipe
// `csi-proxy-bench-mark-begin-<phase>` / `...-end-<phase>` (a wineserver request carrying the
// name, which lets the script cut wineserver's trace at the phase's edges) and prints
// `MARK <edge> <phase>`; results are `RESULT <phase> calls=.. p50_us=.. p99_us=.. max_us=..
// per_s=..` lines. There is no health-check phase: upstream's daemon serves no health service.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"
	"unsafe"

	fsapi "github.com/kubernetes-csi/csi-proxy/client/api/filesystem/v1"
	fsclient "github.com/kubernetes-csi/csi-proxy/client/groups/filesystem/v1"
)

type args struct {
	path           string
	calls          int
	warmup         int
	clients        int
	callsPerClient int
	wait           time.Duration
}

func main() {
	var a args
	flag.StringVar(&a.path, "path", "", "the path PathExists asks about (inside the daemon's kubelet path)")
	flag.IntVar(&a.calls, "calls", 2000, "sequential calls of the one-client phase")
	flag.IntVar(&a.warmup, "warmup", 200, "unmeasured calls before the one-client phase")
	flag.IntVar(&a.clients, "clients", 8, "concurrent clients of the throughput phase, one connection each")
	flag.IntVar(&a.callsPerClient, "calls-per-client", 500, "calls each concurrent client makes")
	waitS := flag.Float64("wait", 60, "how long to wait for the daemon's filesystem v1 pipe to answer, seconds")
	flag.Parse()
	a.wait = time.Duration(*waitS * float64(time.Second))
	if a.path == "" {
		fmt.Fprintln(os.Stderr, "bench-client: --path is required")
		os.Exit(2)
	}
	if err := run(&a); err != nil {
		fmt.Fprintf(os.Stderr, "bench-client: %v\n", err)
		os.Exit(1)
	}
}

func run(a *args) error {
	req := &fsapi.PathExistsRequest{Path: a.path}
	fs, exists, err := waitServing(req, a.wait)
	if err != nil {
		return err
	}
	if !exists {
		// A missing path takes a different host branch: say so rather than measure it silently.
		fmt.Fprintf(os.Stderr, "bench-client: note: %s does not exist for the daemon\n", a.path)
	}
	call := func(c *fsclient.Client) error {
		_, err := c.PathExists(context.Background(), req)
		return err
	}

	// One client, one connection.
	for i := 0; i < a.warmup; i++ {
		if err := call(fs); err != nil {
			return fmt.Errorf("PathExists warm-up: %w", err)
		}
	}
	lat := make([]time.Duration, 0, a.calls)
	mark("begin", "PathExists")
	start := time.Now()
	for i := 0; i < a.calls; i++ {
		t := time.Now()
		if err := call(fs); err != nil {
			return fmt.Errorf("PathExists: %w", err)
		}
		lat = append(lat, time.Since(t))
	}
	wall := time.Since(start)
	mark("end", "PathExists")
	result("PathExists", lat, wall)

	// Throughput: a.clients connections at once, each making a fixed number of calls.
	clients := make([]*fsclient.Client, a.clients)
	for i := range clients {
		c, err := fsclient.NewClient()
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		if err := call(c); err != nil { // warm this connection up
			return fmt.Errorf("PathExists: %w", err)
		}
		clients[i] = c
	}
	name := fmt.Sprintf("PathExists%d", a.clients)
	per := make([][]time.Duration, a.clients)
	errs := make([]error, a.clients)
	var wg sync.WaitGroup
	mark("begin", name)
	start = time.Now()
	for i, c := range clients {
		wg.Add(1)
		go func(i int, c *fsclient.Client) {
			defer wg.Done()
			l := make([]time.Duration, 0, a.callsPerClient)
			for j := 0; j < a.callsPerClient; j++ {
				t := time.Now()
				if err := call(c); err != nil {
					errs[i] = err
					return
				}
				l = append(l, time.Since(t))
			}
			per[i] = l
		}(i, c)
	}
	wg.Wait()
	wall = time.Since(start)
	mark("end", name)
	all := make([]time.Duration, 0, a.clients*a.callsPerClient)
	for i := range per {
		if errs[i] != nil {
			return fmt.Errorf("PathExists: %w", errs[i])
		}
		all = append(all, per[i]...)
	}
	result(name, all, wall)
	return nil
}

// waitServing connects and calls PathExists until it answers (the daemon was just started);
// upstream has no health service to poll. The connection that answered is the one-client
// phase's.
func waitServing(req *fsapi.PathExistsRequest, limit time.Duration) (*fsclient.Client, bool, error) {
	start := time.Now()
	for {
		// NewClient dials the pipe once to see that it exists, then lets grpc dial it again.
		c, err := fsclient.NewClient()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var r *fsapi.PathExistsResponse
			r, err = c.PathExists(ctx, req)
			cancel()
			if err == nil {
				return c, r.Exists, nil
			}
			c.Close()
		}
		if time.Since(start) > limit {
			return nil, false, fmt.Errorf("filesystem v1 did not answer PathExists within %v: %v", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CreateNamedPipeW through the standard library, so the client builds against any upstream
// tag's vendored golang.org/x/sys (v1.1.2's has no CreateNamedPipe).
var createNamedPipe = syscall.NewLazyDLL("kernel32.dll").NewProc("CreateNamedPipeW")

const pipeAccessDuplex = 3 // PIPE_ACCESS_DUPLEX; dwPipeMode 0 is PIPE_TYPE_BYTE

// mark puts a marker into the wineserver trace: creating a named pipe is a request carrying
// its name, seen in the order the server handled it. A failure only loses the marker.
func mark(edge, phase string) {
	name := `\\.\pipe\csi-proxy-bench-mark-` + edge + "-" + phase
	p, err := syscall.UTF16PtrFromString(name)
	if err == nil {
		h, _, e := createNamedPipe.Call(uintptr(unsafe.Pointer(p)), pipeAccessDuplex, 0, 1, 0, 0, 0, 0)
		if syscall.Handle(h) == syscall.InvalidHandle {
			err = e
		} else {
			syscall.CloseHandle(syscall.Handle(h))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-client: marker %s: %v\n", name, err)
	}
	fmt.Printf("MARK %s %s\n", edge, phase)
}

// result prints one RESULT line; quantiles by nearest rank, as the Rust client's.
func result(phase string, lat []time.Duration, wall time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(f float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		r := int(math.Ceil(f * float64(len(lat))))
		if r < 1 {
			r = 1
		}
		if r > len(lat) {
			r = len(lat)
		}
		return lat[r-1]
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	var max time.Duration
	if len(lat) > 0 {
		max = lat[len(lat)-1]
	}
	perS := 0.0
	if wall > 0 {
		perS = float64(len(lat)) / wall.Seconds()
	}
	fmt.Printf("RESULT %s calls=%d p50_us=%.1f p99_us=%.1f max_us=%.1f per_s=%.0f\n",
		phase, len(lat), us(q(0.5)), us(q(0.99)), us(max), perS)
}
