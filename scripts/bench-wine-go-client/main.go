// Command bench-client is the Go twin of csi-proxy's bench client (crates/bench): it calls
// filesystem v1 PathExists the way a CSI driver does, with upstream csi-proxy's generated stubs
// and grpc-go, which writes a unary call's HEADERS and DATA frames together where our Rust
// client does not. scripts/bench-wine.sh (Windows, under wine) and scripts/bench-go-linux.sh
// (Linux) add this directory to an extracted upstream source tree (cmd/bench-client) through
// `go build -overlay` and build it there with `-mod=vendor`, so it uses upstream's vendored grpc
// and stubs; nothing of upstream is kept in this repository.
//
// Only the dial differs by OS (dial_windows.go, dial_linux.go). On Windows it goes through
// upstream's client/groups/filesystem/v1 wrapper over go-winio's pipe dialer, as drivers do; on
// Linux, where that wrapper does not build (go-winio is Windows-only), through the generated
// FilesystemClient (client/api/filesystem/v1, which the wrapper delegates to) on a grpc-go
// connection to the daemon's Unix socket.
//
// Default phases, markers and output are those of the Rust client: warm-up, then sequential
// calls on one connection ("PathExists"), then N connections making a fixed number of calls each
// ("PathExists<N>"). Around each phase it prints `MARK <edge> <phase>` (on Windows also creating
// a named pipe `csi-proxy-bench-mark-begin-<phase>` / `...-end-<phase>`, a wineserver request
// carrying the name, which lets bench-wine.sh cut wineserver's trace at the phase's edges);
// results are `RESULT <phase> calls=.. p50_us=.. p99_us=.. max_us=.. per_s=..` lines. There is
// no health-check phase there: upstream's daemon serves no health service.
//
// With -pair-health (Linux; the Windows wrapper keeps its connection private) it instead alternates
// PathExists and a grpc.health.v1 Check on one connection (the goal is PathExists' p50 at most the
// Check's, on the same endpoint) and prints one line `PAIR calls=.. pathexists_p50_us=..
// check_p50_us=.. ratio_p50=.. pathexists_p99_us=.. check_p99_us=.. ratio_p99=..`. Upstream's
// vendor tree has no health stubs, so the Check is sent with a codec that passes bytes through (the
// request is empty; the answer is checked to be SERVING).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"time"

	fsapi "github.com/kubernetes-csi/csi-proxy/client/api/filesystem/v1"
	"google.golang.org/grpc"
)

type args struct {
	path           string
	calls          int
	warmup         int
	clients        int
	callsPerClient int
	pairHealth     bool
	wait           time.Duration
}

// conn is one connection to the daemon's filesystem v1 endpoint, made by dial (per OS).
type conn struct {
	fs fsapi.FilesystemClient
	// cc is the connection under fs, or nil where the client keeps it to itself (Windows).
	cc    *grpc.ClientConn
	close func() error
}

func main() {
	var a args
	flag.StringVar(&a.path, "path", "", "the path PathExists asks about (inside the daemon's kubelet path)")
	flag.IntVar(&a.calls, "calls", 2000, "sequential calls of the one-client phase (pairs with -pair-health)")
	flag.IntVar(&a.warmup, "warmup", 200, "unmeasured calls before the one-client phase (pairs with -pair-health)")
	flag.IntVar(&a.clients, "clients", 8, "concurrent clients of the throughput phase, one connection each")
	flag.IntVar(&a.callsPerClient, "calls-per-client", 500, "calls each concurrent client makes")
	flag.BoolVar(&a.pairHealth, "pair-health", false, "alternate PathExists and a health Check on one connection and print a PAIR line, instead of the phases")
	waitS := flag.Float64("wait", 60, "how long to wait for the daemon's filesystem v1 endpoint to answer, seconds")
	flag.Parse()
	a.wait = time.Duration(*waitS * float64(time.Second))
	if a.path == "" {
		fmt.Fprintln(os.Stderr, "bench-client: --path is required")
		os.Exit(2)
	}
	if err := checkFlags(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-client: %v\n", err)
		os.Exit(2)
	}
	if err := run(&a); err != nil {
		fmt.Fprintf(os.Stderr, "bench-client: %v\n", err)
		os.Exit(1)
	}
}

func run(a *args) error {
	req := &fsapi.PathExistsRequest{Path: a.path}
	first, exists, err := waitServing(req, a.wait)
	if err != nil {
		return err
	}
	if !exists {
		// A missing path takes a different host branch: say so rather than measure it silently.
		fmt.Fprintf(os.Stderr, "bench-client: note: %s does not exist for the daemon\n", a.path)
	}
	call := func(c *conn) error {
		_, err := c.fs.PathExists(context.Background(), req)
		return err
	}
	if a.pairHealth {
		return runPairs(a, first, call)
	}

	// One client, one connection.
	for i := 0; i < a.warmup; i++ {
		if err := call(first); err != nil {
			return fmt.Errorf("PathExists warm-up: %w", err)
		}
	}
	lat := make([]time.Duration, 0, a.calls)
	mark("begin", "PathExists")
	start := time.Now()
	for i := 0; i < a.calls; i++ {
		t := time.Now()
		if err := call(first); err != nil {
			return fmt.Errorf("PathExists: %w", err)
		}
		lat = append(lat, time.Since(t))
	}
	wall := time.Since(start)
	mark("end", "PathExists")
	result("PathExists", lat, wall)

	// Throughput: a.clients connections at once, each making a fixed number of calls.
	clients := make([]*conn, a.clients)
	for i := range clients {
		c, err := dial()
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
		go func(i int, c *conn) {
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

// rawCodec passes messages through as bytes (*[]byte): upstream's vendor tree has no
// grpc.health.v1 stubs, and the Check request and answer are small enough to write by hand.
// Its name is "proto", so the call carries the content type a generated stub's would.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*v.(*[]byte) = append((*v.(*[]byte))[:0], data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// servingAnswer is HealthCheckResponse{status: SERVING}: field 1, varint 1.
var servingAnswer = []byte{0x08, 0x01}

// runPairs alternates PathExists and a health Check (service "", an empty request) on the one
// connection c, a.warmup unmeasured pairs and then a.calls measured ones, so both see the same
// connection, the same daemon state and the same load on the machine.
func runPairs(a *args, c *conn, pathExists func(*conn) error) error {
	if c.cc == nil {
		return errors.New("-pair-health needs the connection under the filesystem client, which upstream's Windows wrapper keeps to itself (Linux only)")
	}
	in, out := []byte{}, []byte{}
	check := func() error {
		err := c.cc.Invoke(context.Background(), "/grpc.health.v1.Health/Check", &in, &out, grpc.ForceCodec(rawCodec{}))
		if err == nil && !bytes.Equal(out, servingAnswer) {
			err = fmt.Errorf("not SERVING: answer % x", out)
		}
		return err
	}
	for i := 0; i < a.warmup; i++ {
		if err := pathExists(c); err != nil {
			return fmt.Errorf("PathExists warm-up: %w", err)
		}
		if err := check(); err != nil {
			return fmt.Errorf("health Check warm-up: %w", err)
		}
	}
	pe := make([]time.Duration, 0, a.calls)
	hc := make([]time.Duration, 0, a.calls)
	mark("begin", "Pairs")
	for i := 0; i < a.calls; i++ {
		t := time.Now()
		if err := pathExists(c); err != nil {
			return fmt.Errorf("PathExists: %w", err)
		}
		u := time.Now()
		if err := check(); err != nil {
			return fmt.Errorf("health Check: %w", err)
		}
		pe = append(pe, u.Sub(t))
		hc = append(hc, time.Since(u))
	}
	mark("end", "Pairs")
	p50, p99, _ := quantiles(pe)
	h50, h99, _ := quantiles(hc)
	fmt.Printf("PAIR calls=%d pathexists_p50_us=%.1f check_p50_us=%.1f ratio_p50=%.3f pathexists_p99_us=%.1f check_p99_us=%.1f ratio_p99=%.3f\n",
		a.calls, us(p50), us(h50), float64(p50)/float64(h50), us(p99), us(h99), float64(p99)/float64(h99))
	return nil
}

// waitServing connects and calls PathExists until it answers (the daemon was just started);
// upstream has no health service to poll. The connection that answered is the one-client
// phase's.
func waitServing(req *fsapi.PathExistsRequest, limit time.Duration) (*conn, bool, error) {
	start := time.Now()
	for {
		c, err := dial()
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var r *fsapi.PathExistsResponse
			r, err = c.fs.PathExists(ctx, req)
			cancel()
			if err == nil {
				return c, r.Exists, nil
			}
			c.close()
		}
		if time.Since(start) > limit {
			return nil, false, fmt.Errorf("filesystem v1 did not answer PathExists within %v: %v", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mark prints a phase edge and, where the OS has one, puts a marker into a trace (putMarker).
// A failure only loses the marker.
func mark(edge, phase string) {
	if err := putMarker(edge, phase); err != nil {
		fmt.Fprintf(os.Stderr, "bench-client: marker %s %s: %v\n", edge, phase, err)
	}
	fmt.Printf("MARK %s %s\n", edge, phase)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// quantiles sorts lat and returns its p50, p99 (nearest rank, as the Rust client's) and max.
func quantiles(lat []time.Duration) (p50, p99, max time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(f float64) time.Duration {
		r := int(math.Ceil(f * float64(len(lat))))
		if r < 1 {
			r = 1
		}
		if r > len(lat) {
			r = len(lat)
		}
		return lat[r-1]
	}
	return q(0.5), q(0.99), lat[len(lat)-1]
}

// result prints one RESULT line.
func result(phase string, lat []time.Duration, wall time.Duration) {
	p50, p99, max := quantiles(lat)
	perS := 0.0
	if wall > 0 {
		perS = float64(len(lat)) / wall.Seconds()
	}
	fmt.Printf("RESULT %s calls=%d p50_us=%.1f p99_us=%.1f max_us=%.1f per_s=%.0f\n",
		phase, len(lat), us(p50), us(p99), us(max), perS)
}
