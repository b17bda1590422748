package e2e

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// delayedAddr listens on a free loopback port and forwards every
// connection to addr, holding each chunk a client sends for d before
// Redis sees it (answers come back at once). A command pelwarden sends is
// then run d after it was sent, so what other clients do in between is
// seen by it, whatever the scheduler does.
func delayedAddr(t *testing.T, addr string, d time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", addr)
			if err != nil {
				_ = client.Close()
				continue
			}
			mu.Lock()
			open = append(open, client, server)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(client, server); _ = client.Close() })
			wg.Go(func() { forwardLate(server, client, d) })
		}
	})
	return ln.Addr().String()
}

// forwardLate copies src to dst, each chunk d after it was read, in order.
func forwardLate(dst, src net.Conn, d time.Duration) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(d), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	_ = dst.Close()
	for range chunks { // let the reader finish once src is closed
	}
}
