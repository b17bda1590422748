package kubetest

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pelwarden/pelwarden/internal/proctest"
)

// Proxy is a TCP load balancer on a fixed loopback port in front of the
// cluster's API servers, for clients configured with one address: it can
// route them to another server, or refuse them as a dead server's port
// does. TLS passes through, so clients verify the API server's own
// certificate.
type Proxy struct {
	port int

	mu       sync.Mutex
	ln       net.Listener
	upstream string
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// StartProxy listens on a free port and routes to server.
func StartProxy(tb testing.TB, server *APIServer) *Proxy {
	tb.Helper()
	p := &Proxy{conns: map[net.Conn]struct{}{}}
	err := onFreePorts(1, func(ports []int) error {
		p.port = ports[0]
		err := p.Up(server)
		var op *net.OpError
		if errors.As(err, &op) {
			return proctest.ErrPortTaken
		}
		return err
	})
	if err != nil {
		tb.Fatalf("kubetest: proxy: %v", err)
	}
	tb.Cleanup(p.close)
	return p
}

// URL is the proxy's https address.
func (p *Proxy) URL() string { return "https://127.0.0.1:" + strconv.Itoa(p.port) }

// Up routes new connections to server, opening the port if it is down.
// Connections to the previous server stay until Down or Cut.
func (p *Proxy) Up(server *APIServer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = "127.0.0.1:" + strconv.Itoa(server.port)
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p.port))
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Go(func() { p.accept(ln) })
	return nil
}

// Down closes the port, so connecting is refused, and cuts every open
// connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	p.Cut()
}

// Cut closes every open connection, as a load balancer that fails over
// does; clients see their streams end and connect again.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *Proxy) close() {
	p.Down()
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		client, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		upstream := p.upstream
		p.mu.Unlock()
		server, err := net.DialTimeout("tcp", upstream, 2*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(client, server) })
		p.wg.Go(func() { p.pipe(server, client) })
	}
}

// pipe copies one direction and closes both ends when it ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
