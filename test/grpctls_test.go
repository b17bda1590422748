package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// kedaConfig builds a client tls.Config from the three TriggerAuthentication
// parameters KEDA's external scaler takes (caCert, tlsClientCert,
// tlsClientKey, each PEM text), the way KEDA does. Empty client PEMs mean
// no client certificate.
func kedaConfig(t *testing.T, caCert, tlsClientCert, tlsClientKey []byte) *tls.Config {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}
	require.True(t, cfg.RootCAs.AppendCertsFromPEM(caCert), "caCert holds a certificate")
	if len(tlsClientCert) > 0 {
		cert, err := tls.X509KeyPair(tlsClientCert, tlsClientKey)
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// kedaCreds is kedaConfig as gRPC credentials.
func kedaCreds(t *testing.T, caCert, tlsClientCert, tlsClientKey []byte) credentials.TransportCredentials {
	t.Helper()
	return credentials.NewTLS(kedaConfig(t, caCert, tlsClientCert, tlsClientKey))
}

// overTLS12 pins cfg to TLS 1.2. Under TLS 1.3 a client finishes its
// handshake before the server has checked the client's certificate, so a
// refusal reaches the client as the server's alert or as a closed
// connection, whichever it reads first; under TLS 1.2 the alert ends the
// handshake itself, and a test can check the reason.
func overTLS12(cfg *tls.Config) credentials.TransportCredentials {
	cfg.MaxVersion = tls.VersionTLS12
	return credentials.NewTLS(cfg)
}

// presenting makes cfg present pair always, even to a server whose
// certificate request names other CAs (given Certificates, a Go client
// would send none), so that the server's own verification refuses it.
func presenting(t *testing.T, cfg *tls.Config, pair tlstest.Pair) *tls.Config {
	t.Helper()
	cert := pair.TLS(t)
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg
}

// mtls is a pelwarden serving mutual TLS from a Secret-like mount, with a
// Redis holding a group whose one live consumer has 4 entries pending.
type mtls struct {
	*pelwarden
	ca     *tlstest.CA
	server tlstest.Pair
	keda   tlstest.Pair
	secret *tlstest.SecretDir
	md     map[string]string
}

func startMutualTLS(t *testing.T) *mtls {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 6)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 4)

	m := &mtls{ca: tlstest.NewCA(t, "pelwarden-ca"), md: map[string]string{"stream": "jobs", "consumerGroup": "workers"}}
	m.server = m.ca.Server(t)
	m.keda = m.ca.Client(t, "keda-operator")
	m.secret = tlstest.NewSecretDir(t, tlstest.ServerFiles(m.server, m.ca))
	cfg := testConfig(srv.Addr())
	cfg.GRPC.TLS = config.GRPCTLS{
		CertFile:       m.secret.Path(tlstest.CertKey),
		KeyFile:        m.secret.Path(tlstest.KeyKey),
		ClientCAFile:   m.secret.Path(tlstest.CAKey),
		ReloadInterval: 50 * time.Millisecond,
		MinVersion:     "1.2",
	}
	m.pelwarden = runPelwarden(t, cfg, kedaCreds(t, m.ca.CertPEM, m.keda.CertPEM, m.keda.KeyPEM))
	return m
}

// call runs GetMetrics on a new connection with creds and returns the value
// and the serial of the certificate the server presented.
func (m *mtls) call(t *testing.T, creds credentials.TransportCredentials) (int64, *big.Int, error) {
	t.Helper()
	conn, err := grpc.NewClient(m.app.GRPCAddr(), grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	res, err := externalscaler.NewExternalScalerClient(conn).GetMetrics(ctx,
		&externalscaler.GetMetricsRequest{ScaledObjectRef: ref(m.md), MetricName: "s0-pelwarden"}, grpc.Peer(&p))
	if err != nil {
		return 0, nil, err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	require.True(t, ok, "the call went over TLS, got %T", p.AuthInfo)
	return res.GetMetricValues()[0].GetMetricValue(), info.State.PeerCertificates[0].SerialNumber, nil
}

func TestKEDAWithAClientCertificateGetsMetricsOverMutualTLS(t *testing.T) {
	t.Parallel()
	m := startMutualTLS(t)
	ctx := context.Background()

	v, err := metric(ctx, t, m.client, m.md)
	require.NoError(t, err)
	require.Equal(t, int64(4), v, "the live consumer's pending entries")
	active, err := m.client.IsActive(ctx, ref(m.md))
	require.NoError(t, err)
	require.True(t, active.GetResult())
	_, serial, err := m.call(t, kedaCreds(t, m.ca.CertPEM, m.keda.CertPEM, m.keda.KeyPEM))
	require.NoError(t, err)
	require.Equal(t, m.server.Cert.SerialNumber, serial, "the configured certificate is served")

	health, err := healthpb.NewHealthClient(m.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health shares the TLS port")
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, health.GetStatus())

	// The HTTP server stays plain HTTP, for kubelet probes and Prometheus.
	resp, err := http.Get("http://" + m.app.HTTPAddr() + "/healthz")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, scrape(t, m.app.HTTPAddr()), `pelwarden_tls_reloads_total{result="success"} 1`)
}

func TestGRPCPortRefusesClientsWithoutATrustedCertificate(t *testing.T) {
	t.Parallel()
	m := startMutualTLS(t)
	stranger := tlstest.NewCA(t, "other-ca").Client(t, "keda-operator")
	tests := map[string]struct {
		creds credentials.TransportCredentials
		want  string // what the handshake failed on, where the client can tell
	}{
		"no client certificate": {kedaCreds(t, m.ca.CertPEM, nil, nil), ""},
		// TLS 1.2 has no certificate_required alert; Go's server sends this.
		"no client certificate, TLS 1.2": {overTLS12(kedaConfig(t, m.ca.CertPEM, nil, nil)), "remote error: tls: handshake failure"},
		// Given only a certificate of another CA, a Go client sends none.
		"client certificate of another CA, as KEDA sends it": {kedaCreds(t, m.ca.CertPEM, stranger.CertPEM, stranger.KeyPEM), ""},
		"client certificate of another CA, presented anyway": {
			overTLS12(presenting(t, kedaConfig(t, m.ca.CertPEM, nil, nil), stranger)), "unknown certificate authority"},
		"plaintext": {insecure.NewCredentials(), ""},
		"TLS without trusting pelwarden's CA": {
			kedaCreds(t, tlstest.NewCA(t, "unrelated").CertPEM, m.keda.CertPEM, m.keda.KeyPEM), "certificate signed by unknown authority"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, _, err := m.call(t, tt.creds)
			require.Equal(t, codes.Unavailable, status.Code(err), "refused at the handshake: %v", err)
			if tt.want != "" {
				require.ErrorContains(t, err, tt.want)
			}
		})
	}
	_, _, err := m.call(t, kedaCreds(t, m.ca.CertPEM, m.keda.CertPEM, m.keda.KeyPEM))
	require.NoError(t, err, "the trusted client still gets through")
}

func TestRotatedServerCertificateReachesNewConnectionsWithoutRestart(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{"renewed by the same CA": false, "reissued by a new CA": true}
	for name, newCA := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := startMutualTLS(t)
			ctx := context.Background()
			_, err := metric(ctx, t, m.client, m.md) // KEDA's long-lived connection is open
			require.NoError(t, err)

			ca := m.ca
			if newCA {
				ca = tlstest.NewCA(t, "pelwarden-ca-2")
			}
			next := ca.Server(t)
			files := tlstest.ServerFiles(next, nil)
			files[tlstest.CAKey] = m.ca.CertPEM // clients keep their certificates
			m.secret.Update(t, files)

			creds := kedaCreds(t, ca.CertPEM, m.keda.CertPEM, m.keda.KeyPEM)
			eventually(t, 5*time.Second, func() error {
				v, serial, err := m.call(t, creds)
				switch {
				case err != nil:
					return err
				case serial.Cmp(next.Cert.SerialNumber) != 0:
					return fmt.Errorf("new connection got serial %x, want the rotated %x", serial, next.Cert.SerialNumber)
				case v != 4:
					return fmt.Errorf("metric %d, want 4", v)
				}
				return nil
			})
			v, err := metric(ctx, t, m.client, m.md)
			require.NoError(t, err, "the connection opened before the rotation goes on working")
			require.Equal(t, int64(4), v)
		})
	}
}

func TestRotatedClientCAIsHonouredWithoutRestart(t *testing.T) {
	t.Parallel()
	m := startMutualTLS(t)
	clientCA := tlstest.NewCA(t, "keda-clients-2")
	newKEDA := clientCA.Client(t, "keda-operator")
	files := tlstest.ServerFiles(m.server, nil)
	files[tlstest.CAKey] = clientCA.CertPEM
	m.secret.Update(t, files)

	eventually(t, 5*time.Second, func() error {
		_, _, err := m.call(t, kedaCreds(t, m.ca.CertPEM, newKEDA.CertPEM, newKEDA.KeyPEM))
		return err
	})
	_, _, err := m.call(t, overTLS12(presenting(t, kedaConfig(t, m.ca.CertPEM, nil, nil), m.keda)))
	require.Equal(t, codes.Unavailable, status.Code(err), "a client of the rotated-out CA is refused: %v", err)
	require.ErrorContains(t, err, "unknown certificate authority")
}

func TestBrokenRotationKeepsServingThePreviousPair(t *testing.T) {
	t.Parallel()
	m := startMutualTLS(t)
	other := m.ca.Server(t)
	// A half-finished rotation: the new certificate beside the old key.
	m.secret.Update(t, map[string][]byte{tlstest.CertKey: other.CertPEM, tlstest.KeyKey: m.server.KeyPEM, tlstest.CAKey: m.ca.CertPEM})

	eventually(t, 5*time.Second, func() error {
		if body := scrape(t, m.app.HTTPAddr()); !strings.Contains(body, `pelwarden_tls_reloads_total{result="failure"} 1`) ||
			!strings.Contains(body, "pelwarden_tls_last_reload_successful 0") {
			return fmt.Errorf("the failed reload is not reported yet")
		}
		return nil
	})
	v, serial, err := m.call(t, kedaCreds(t, m.ca.CertPEM, m.keda.CertPEM, m.keda.KeyPEM))
	require.NoError(t, err, "new connections still succeed")
	require.Equal(t, m.server.Cert.SerialNumber, serial, "with the previous pair")
	require.Equal(t, int64(4), v)
}
