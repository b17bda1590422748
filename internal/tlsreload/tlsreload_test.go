package tlsreload_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/tlsreload"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// server is a TLS listener on loopback that, once a handshake succeeds,
// writes one byte: a client that reads it knows the server accepted it,
// which under TLS 1.3 the client's own handshake does not tell.
func server(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte{1})
					_, _ = io.Copy(io.Discard, c)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// dial connects as a client that trusts ca and presents client (if any),
// and returns the server certificate once the server has accepted it.
// With a session cache, the client tries to resume an earlier session.
func dial(t *testing.T, addr string, ca *tlstest.CA, client *tlstest.Pair, cache ...tls.ClientSessionCache) (*x509.Certificate, error) {
	t.Helper()
	cfg := ca.ClientConfig(t)
	if client != nil {
		cfg = ca.ClientConfig(t, *client)
	}
	if len(cache) > 0 {
		cfg.ClientSessionCache = cache[0]
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

type fixture struct {
	ca     *tlstest.CA
	pair   tlstest.Pair
	secret *tlstest.SecretDir
	r      *tlsreload.Reloader
	reg    *prometheus.Registry
	addr   string
	log    *bytes.Buffer
}

// start serves a fresh CA's server pair from a Secret-like mount, with the
// CA as client CA when mutual.
func start(t *testing.T, mutual bool) *fixture {
	t.Helper()
	f := &fixture{ca: tlstest.NewCA(t, "ca-1"), reg: prometheus.NewRegistry(), log: &bytes.Buffer{}}
	f.pair = f.ca.Server(t)
	f.secret = tlstest.NewSecretDir(t, tlstest.ServerFiles(f.pair, f.ca))
	files := tlsreload.Files{CertFile: f.secret.Path(tlstest.CertKey), KeyFile: f.secret.Path(tlstest.KeyKey)}
	if mutual {
		files.ClientCAFile = f.secret.Path(tlstest.CAKey)
	}
	var err error
	f.r, err = tlsreload.New(files, tlsreload.Options{
		Interval: time.Hour, MinVersion: tls.VersionTLS12,
		Log:     slog.New(slog.NewTextHandler(f.log, nil)),
		Metrics: tlsreload.NewMetrics(f.reg),
	})
	require.NoError(t, err)
	f.addr = server(t, f.r.ServerConfig())
	return f
}

// reloads reads pelwarden_tls_reloads_total{result}.
func (f *fixture) reloads(result string) float64 {
	return f.metric("pelwarden_tls_reloads_total", result)
}

// gauge reads a metric without labels.
func (f *fixture) gauge(name string) float64 {
	return f.metric(name, "")
}

// metric returns the value of the series of name whose only label has the
// value label ("" for none), or -1 when there is none.
func (f *fixture) metric(name, label string) float64 {
	mfs, err := f.reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() != label {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

func TestNewConnectionsGetTheRotatedCertificateWithoutRestart(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		newCA bool
	}{
		"renewed by the same CA": {newCA: false},
		"reissued by a new CA":   {newCA: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := start(t, false)
			got, err := dial(t, f.addr, f.ca, nil)
			require.NoError(t, err)
			require.Equal(t, f.pair.Cert.SerialNumber, got.SerialNumber, "the first certificate is served")

			ca := f.ca
			if tt.newCA {
				ca = tlstest.NewCA(t, "ca-2")
			}
			next := ca.Server(t)
			f.secret.Update(t, tlstest.ServerFiles(next, ca))
			changed, err := f.r.Reload()
			require.NoError(t, err)
			require.True(t, changed, "a swapped ..data link is a change")

			got, err = dial(t, f.addr, ca, nil)
			require.NoError(t, err)
			require.Equal(t, next.Cert.SerialNumber, got.SerialNumber, "a new connection sees the rotated certificate")
			require.InDelta(t, 2.0, f.reloads("success"), 0, "the first load and the rotation")
			require.InDelta(t, float64(next.Cert.NotAfter.Unix()), f.gauge("pelwarden_tls_cert_not_after_seconds"), 0)

			changed, err = f.r.Reload()
			require.NoError(t, err)
			require.False(t, changed, "unchanged files are not a reload")
		})
	}
}

func TestBrokenRotationKeepsServingThePreviousPair(t *testing.T) {
	t.Parallel()
	tests := map[string]func(f *fixture, other tlstest.Pair) map[string][]byte{
		"key of another certificate": func(f *fixture, other tlstest.Pair) map[string][]byte {
			return map[string][]byte{tlstest.CertKey: other.CertPEM, tlstest.KeyKey: f.pair.KeyPEM, tlstest.CAKey: f.ca.CertPEM}
		},
		"half-written certificate": func(f *fixture, other tlstest.Pair) map[string][]byte {
			return map[string][]byte{tlstest.CertKey: other.CertPEM[:len(other.CertPEM)/2], tlstest.KeyKey: other.KeyPEM, tlstest.CAKey: f.ca.CertPEM}
		},
		"empty key": func(f *fixture, other tlstest.Pair) map[string][]byte {
			return map[string][]byte{tlstest.CertKey: other.CertPEM, tlstest.KeyKey: nil, tlstest.CAKey: f.ca.CertPEM}
		},
		"client CA that is not PEM": func(f *fixture, other tlstest.Pair) map[string][]byte {
			return map[string][]byte{tlstest.CertKey: other.CertPEM, tlstest.KeyKey: other.KeyPEM, tlstest.CAKey: []byte("not a certificate")}
		},
		"files gone": func(*fixture, tlstest.Pair) map[string][]byte {
			return map[string][]byte{}
		},
	}
	for name, broken := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := start(t, true)
			client := f.ca.Client(t, "keda")
			other := f.ca.Server(t)
			f.secret.Update(t, broken(f, other))

			changed, err := f.r.Reload()
			require.Error(t, err)
			require.False(t, changed)
			got, err := dial(t, f.addr, f.ca, &client)
			require.NoError(t, err, "the server still accepts clients")
			require.Equal(t, f.pair.Cert.SerialNumber, got.SerialNumber, "the previous pair is still served")
			require.InDelta(t, 1.0, f.reloads("failure"), 0)
			require.Zero(t, f.gauge("pelwarden_tls_last_reload_successful"))
			require.Contains(t, f.log.String(), "still serving the previous certificate")

			_, err = f.r.Reload()
			require.Error(t, err, "the files are still not served")
			require.InDelta(t, 1.0, f.reloads("failure"), 0, "the same bad content is reported once")

			f.secret.Update(t, tlstest.ServerFiles(other, f.ca))
			changed, err = f.r.Reload()
			require.NoError(t, err)
			require.True(t, changed, "the rotation completes once the files are whole")
			require.InDelta(t, 1.0, f.gauge("pelwarden_tls_last_reload_successful"), 0)
		})
	}
}

func TestRotatedClientCAIsHonoured(t *testing.T) {
	t.Parallel()
	f := start(t, true)
	oldClient := f.ca.Client(t, "keda-old")
	sessions := tls.NewLRUClientSessionCache(4)
	_, err := dial(t, f.addr, f.ca, &oldClient, sessions)
	require.NoError(t, err, "a client of the first CA is accepted")
	_, err = dial(t, f.addr, f.ca, nil)
	require.Error(t, err, "mutual TLS refuses a client without a certificate")

	clientCA := tlstest.NewCA(t, "clients-2")
	files := tlstest.ServerFiles(f.pair, nil)
	files[tlstest.CAKey] = clientCA.CertPEM
	f.secret.Update(t, files)
	changed, err := f.r.Reload()
	require.NoError(t, err)
	require.True(t, changed, "a new client CA alone is a change")

	newClient := clientCA.Client(t, "keda-new")
	_, err = dial(t, f.addr, f.ca, &newClient)
	require.NoError(t, err, "a client of the new CA is accepted")
	_, err = dial(t, f.addr, f.ca, &oldClient)
	require.Error(t, err, "a client of the rotated-out CA is refused")
	_, err = dial(t, f.addr, f.ca, &oldClient, sessions)
	require.Error(t, err, "nor can it resume a session from before the rotation")
}

func TestRunPicksUpAChangeWithinTheInterval(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	first, next := ca.Server(t), ca.Server(t)
	secret := tlstest.NewSecretDir(t, tlstest.ServerFiles(first, nil))
	r, err := tlsreload.New(
		tlsreload.Files{CertFile: secret.Path(tlstest.CertKey), KeyFile: secret.Path(tlstest.KeyKey)},
		tlsreload.Options{Interval: 20 * time.Millisecond, MinVersion: tls.VersionTLS13, Log: slog.New(slog.DiscardHandler)},
	)
	require.NoError(t, err)
	addr := server(t, r.ServerConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	cert, err := dial(t, addr, ca, nil)
	require.NoError(t, err)
	require.Equal(t, first.Cert.SerialNumber, cert.SerialNumber, "the first certificate is served at start")
	secret.Update(t, tlstest.ServerFiles(next, nil))
	require.Eventually(t, func() bool {
		cert, err := dial(t, addr, ca, nil)
		return err == nil && cert.SerialNumber.Cmp(next.Cert.SerialNumber) == 0
	}, 5*time.Second, 10*time.Millisecond, "a new handshake gets the new certificate without a Reload call")
}

func TestNewRefusesFilesThatMakeNoIdentity(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "ca")
	a, b := ca.Server(t), ca.Server(t)
	secret := tlstest.NewSecretDir(t, map[string][]byte{"a.crt": a.CertPEM, "a.key": a.KeyPEM, "b.key": b.KeyPEM, "ca.crt": []byte("junk")})
	opts := tlsreload.Options{Interval: time.Second, MinVersion: tls.VersionTLS12, Log: slog.New(slog.DiscardHandler)}
	tests := map[string]struct {
		files tlsreload.Files
		opts  tlsreload.Options
		want  string
	}{
		"mismatched pair": {tlsreload.Files{CertFile: secret.Path("a.crt"), KeyFile: secret.Path("b.key")}, opts, "private key does not match public key"},
		"missing file":    {tlsreload.Files{CertFile: secret.Path("none.crt"), KeyFile: secret.Path("b.key")}, opts, "no such file"},
		"bad client CA":   {tlsreload.Files{CertFile: secret.Path("a.crt"), KeyFile: secret.Path("a.key"), ClientCAFile: secret.Path("ca.crt")}, opts, "client CA file holds no PEM certificate"},
		"no interval":     {tlsreload.Files{CertFile: "x", KeyFile: "y"}, tlsreload.Options{MinVersion: tls.VersionTLS12, Log: opts.Log}, "Options.Interval must be positive"},
		"no key file":     {tlsreload.Files{CertFile: "x"}, opts, "Files.CertFile and Files.KeyFile are required"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := tlsreload.New(tt.files, tt.opts)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
