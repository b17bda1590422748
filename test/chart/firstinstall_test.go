package chart

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/pelwarden/pelwarden/internal/metadata"
	registry "github.com/pelwarden/pelwarden/internal/trigger"
)

// The first install is one set of files in the chart's examples/: the
// values, KEDA's TriggerAuthentication and ScaledObject, and two recipes
// for the TLS Secrets. The README, docs/getting-started.md and the chart's
// NOTES show these files, and nothing else, as the first install.
const (
	firstValues  = "values.yaml"
	firstAuth    = "triggerauthentication.yaml"
	firstScaled  = "scaledobject.yaml"
	certManager  = "cert-manager.yaml"
	opensslSteps = "tls-openssl.sh"
)

func exampleFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "examples", name))
	require.NoError(t, err)
	return string(data)
}

// firstInstall is what the files say, decoded: the ScaledObject's one
// trigger and namespace, the TriggerAuthentication, and the Secret names
// the values and the TriggerAuthentication read.
type firstInstall struct {
	scaled, auth    kedaObject
	trigger         trigger
	serverSecret    string // grpc.tls.secretName, in the release namespace
	clientSecret    string // the TriggerAuthentication's Secret
	scalerHost      string
	releaseNS       string
	clientCAEnabled bool
}

func readFirstInstall(t *testing.T) firstInstall {
	t.Helper()
	objs, err := kedaDocs(exampleFile(t, firstAuth) + "---\n" + exampleFile(t, firstScaled))
	require.NoError(t, err, "the first install's KEDA objects match KEDA's CRDs")
	f := firstInstall{scaled: byKind(objs, "ScaledObject")[0], auth: byKind(objs, "TriggerAuthentication")[0]}
	trs := triggers(f.scaled)
	require.Len(t, trs, 1)
	f.trigger = trs[0]
	host, _, err := net.SplitHostPort(f.trigger.metadata["scalerAddress"])
	require.NoError(t, err)
	f.scalerHost = host
	// pelwarden.<namespace>.svc: the release namespace of the install.
	parts := strings.Split(host, ".")
	require.Len(t, parts, 3, "scalerAddress is <release>.<namespace>.svc")
	f.releaseNS = parts[1]
	var values struct {
		GRPC struct {
			TLS struct {
				SecretName string `json:"secretName"`
				ClientCA   struct {
					Enabled bool `json:"enabled"`
				} `json:"clientCA"`
			} `json:"tls"`
		} `json:"grpc"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(exampleFile(t, firstValues)), &values))
	f.serverSecret, f.clientCAEnabled = values.GRPC.TLS.SecretName, values.GRPC.TLS.ClientCA.Enabled
	spec := f.auth.body["spec"].(map[string]any)
	for _, r := range spec["secretTargetRef"].([]any) {
		f.clientSecret = r.(map[string]any)["name"].(string)
	}
	return f
}

// TestTheFirstInstallIsAdmittedByItsOwnValues: the chart rendered with the
// first install's values loads in pelwarden, and that configuration's
// trigger policy admits the ScaledObject's trigger in its namespace: its
// metric, and its hygiene once it asks for reclaim: requeue. The trigger
// uses the TriggerAuthentication, which hands KEDA a CA and a client
// certificate from one Secret of the ScaledObject's namespace.
func TestTheFirstInstallIsAdmittedByItsOwnValues(t *testing.T) {
	t.Parallel()
	f := readFirstInstall(t)
	stream, err := renderChart(t, chartDir, []string{filepath.Join(chartDir, "examples", firstValues)}, nil)
	require.NoError(t, err)
	manifests, err := decodeManifests(stream)
	require.NoError(t, err)
	cfg, err := loadRendered(t, manifests)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.GRPC.TLS.ClientCAFile, "the values serve mutual TLS")
	reg := registry.New(registry.Options{Policy: cfg.Triggers, Shares: cfg.TriggerShares(), Expiry: time.Minute,
		Enroll: func(registry.Enrollment) error { return nil }, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, prometheus.NewRegistry())
	ns := f.scaled.meta.Namespace
	env := cfg.Env()
	env.Namespace = ns
	asks := map[string]string{"reclaim": "requeue"}
	for k, v := range f.trigger.metadata {
		asks[k] = v
	}
	for name, md := range map[string]map[string]string{"as written": f.trigger.metadata, "asking for reclaim: requeue": asks} {
		r, err := metadata.ParseTrigger(md, env)
		require.NoError(t, err, "%s: pelwarden parses the trigger", name)
		res := reg.Check(ns, r)
		require.Nil(t, res.Denied, "%s: the values' policy serves the metric in namespace %s", name, ns)
		require.Nil(t, res.Hygiene, "%s: and admits its hygiene", name)
	}
	require.Equal(t, f.auth.meta.Name, f.trigger.authRef)
	require.Equal(t, ns, f.auth.meta.Namespace)
	require.Equal(t, kedaTLSParams, authParams(f.auth))
	require.True(t, f.clientCAEnabled)
}

// TestNotesPrintTheFirstInstall: installed with the first install's
// values as release pelwarden in namespace pelwarden, the notes print the
// TriggerAuthentication and ScaledObject files as they are; a release
// without those values is warned that they need them, and gets its own
// gRPC address in scalerAddress.
func TestNotesPrintTheFirstInstall(t *testing.T) {
	t.Parallel()
	auth, scaled := exampleFile(t, firstAuth), exampleFile(t, firstScaled)
	notes := helmNotes(t, "pelwarden", "pelwarden", filepath.Join(chartDir, "examples", firstValues))
	require.Contains(t, notes, auth+"---\n"+scaled, "the notes show the files whole")
	require.NotContains(t, notes, "This release lacks")

	notes = helmNotes(t, releaseName, namespace, "")
	require.Contains(t, notes, "This release lacks what they need from examples/values.yaml")
	require.Contains(t, notes, "scalerAddress: pw-pelwarden.apps.svc:9090")
	start := strings.Index(notes, "# KEDA's client identity")
	require.GreaterOrEqual(t, start, 0)
	_, err := kedaDocs(notes[start:])
	require.NoError(t, err, "the objects the notes print match KEDA's CRDs")
}

// helmNotes is NOTES.txt of release in namespace, with values if set.
func helmNotes(t *testing.T, release, ns, values string) string {
	t.Helper()
	args := []string{"install", release, chartDir, "--namespace", ns, "--dry-run=client", "--output", "json"}
	if values != "" {
		args = append(args, "--values", values)
	}
	out, errOut, err := helmRun(t, args...)
	require.NoError(t, err, errOut)
	var rel struct {
		Info struct {
			Notes string `json:"notes"`
		} `json:"info"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &rel))
	return rel.Info.Notes
}

// TestTheCertManagerRecipeMakesTheSecretsTheFirstInstallReads: every
// object of the recipe matches cert-manager's CRDs (its published
// module's deploy/crds); the serving certificate is the Secret the values
// name, in the release namespace, for the host KEDA dials; the client
// certificate is the Secret the TriggerAuthentication reads, in the
// ScaledObject's namespace; both are signed by the CA the issuers chain
// to, kept where a ClusterIssuer reads it.
func TestTheCertManagerRecipeMakesTheSecretsTheFirstInstallReads(t *testing.T) {
	t.Parallel()
	f := readFirstInstall(t)
	docs, err := splitDocuments(exampleFile(t, certManager))
	require.NoError(t, err)
	certs := map[string]map[string]any{} // by secretName
	issuers := map[string]map[string]any{}
	var caNS string
	for _, doc := range docs {
		obj, err := certManagerModule.decode(doc)
		require.NoError(t, err, "the recipe matches cert-manager's CRDs")
		spec := obj.body["spec"].(map[string]any)
		switch obj.kind {
		case "Certificate":
			spec["namespace"] = obj.meta.Namespace
			certs[spec["secretName"].(string)] = spec
		case "Issuer", "ClusterIssuer":
			issuers[obj.kind+"/"+obj.meta.Name] = spec
			if obj.kind == "Issuer" {
				caNS = obj.meta.Namespace
			}
		}
	}
	// The chain: each Certificate's issuer is in the recipe; the
	// ClusterIssuer's CA is the CA Certificate, in cert-manager's own
	// namespace, where a ClusterIssuer reads Secrets.
	for name, c := range certs {
		ref := c["issuerRef"].(map[string]any)
		require.Contains(t, issuers, ref["kind"].(string)+"/"+ref["name"].(string), "%s: its issuer is in the recipe", name)
	}
	ca := issuers["ClusterIssuer/pelwarden-ca"]["ca"].(map[string]any)["secretName"].(string)
	require.Equal(t, true, certs[ca]["isCA"])
	require.Equal(t, "cert-manager", certs[ca]["namespace"])
	require.Equal(t, "cert-manager", caNS)

	server := certs[f.serverSecret]
	require.NotNil(t, server, "a Certificate writes grpc.tls.secretName, %s", f.serverSecret)
	require.Equal(t, f.releaseNS, server["namespace"])
	require.Contains(t, server["dnsNames"], f.scalerHost, "KEDA checks the host of scalerAddress")
	require.Contains(t, server["dnsNames"], f.scalerHost+".cluster.local")
	require.Equal(t, []any{"server auth"}, server["usages"])
	client := certs[f.clientSecret]
	require.NotNil(t, client, "a Certificate writes the TriggerAuthentication's Secret, %s", f.clientSecret)
	require.Equal(t, f.scaled.meta.Namespace, client["namespace"])
	require.Equal(t, []any{"client auth"}, client["usages"])
}

// secretCommand is one `kubectl -n NS create secret generic NAME
// --from-file=KEY=FILE ...` of the openssl recipe.
var secretCommand = regexp.MustCompile(`kubectl -n (\S+) create secret generic (\S+)((?:\s+(?:\\\n\s*)?--from-file=\S+)+)`)

// TestTheOpenSSLRecipeCreatesTheSecretsTheFirstInstallReads: the recipe's
// two Secrets are the one the values name, in the release namespace, and
// the one the TriggerAuthentication reads, in the ScaledObject's, each
// with the keys read from it. (The recipe itself runs, and pelwarden and
// KEDA's client handshake with what it makes, in test/tlsrecipe_test.go.)
func TestTheOpenSSLRecipeCreatesTheSecretsTheFirstInstallReads(t *testing.T) {
	t.Parallel()
	f := readFirstInstall(t)
	got := map[string][]string{}
	for _, m := range secretCommand.FindAllStringSubmatch(exampleFile(t, opensslSteps), -1) {
		var keys []string
		for _, ff := range regexp.MustCompile(`--from-file=([^=\s]+)`).FindAllStringSubmatch(m[3], -1) {
			keys = append(keys, filepath.Base(ff[1]))
		}
		slices.Sort(keys)
		got[m[1]+"/"+m[2]] = keys
	}
	want := []string{"ca.crt", "tls.crt", "tls.key"}
	require.Equal(t, map[string][]string{f.releaseNS + "/" + f.serverSecret: want, f.scaled.meta.Namespace + "/" + f.clientSecret: want}, got)
}

// TestTheCertManagerCheckRejectsWhatCertManagerWouldNot: the schema check
// above means something only if it fails on a misspelled field, a usage
// cert-manager does not know, and a missing required field.
func TestTheCertManagerCheckRejectsWhatCertManagerWouldNot(t *testing.T) {
	t.Parallel()
	const cert = `apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: a, namespace: jobs}
spec:
  secretName: a
  dnsNames: [a.jobs.svc]
  usages: [server auth]
  issuerRef: {name: ca, kind: ClusterIssuer}
`
	for name, tc := range map[string]struct{ doc, problem string }{
		"a valid Certificate":  {cert, ""},
		"a misspelled field":   {strings.Replace(cert, "dnsNames", "dnsName", 1), ".spec.dnsName: unknown field"},
		"an unknown usage":     {strings.Replace(cert, "server auth", "serverAuth", 1), ".spec.usages[0]: must be one of"},
		"no secret name":       {strings.Replace(cert, "  secretName: a\n", "", 1), ".spec.secretName: is required"},
		"another API version":  {strings.Replace(cert, "cert-manager.io/v1", "cert-manager.io/v1alpha2", 1), "apiVersion must be cert-manager.io/v1"},
		"an issuer of no kind": {strings.Replace(cert, "kind: Certificate", "kind: Certificat", 1), `kind "Certificat"`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := certManagerModule.decode([]byte(tc.doc))
			if tc.problem == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.problem)
		})
	}
}
