package chart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/pelwarden/pelwarden/internal/config"
)

// configDir is where the chart mounts config.yaml and every file it names.
const configDir = "/etc/pelwarden"

// projectedFile is one file of the config volume and where it comes from.
type projectedFile struct {
	kind, name, key string
}

// projectedFiles lists the files the pod sees under configDir, by path
// relative to it.
func projectedFiles(dep *appsv1.Deployment) (map[string]projectedFile, error) {
	pod := dep.Spec.Template.Spec
	var volume string
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath == configDir {
			volume = m.Name
		} else if strings.HasPrefix(m.MountPath, configDir) {
			return nil, fmt.Errorf("volume %s is mounted inside %s; nested mounts are fragile on a read-only root", m.Name, configDir)
		}
		if m.SubPath != "" {
			return nil, fmt.Errorf("volume %s is mounted with subPath, which never sees a renewed Secret", m.Name)
		}
	}
	files := map[string]projectedFile{}
	for _, v := range pod.Volumes {
		if v.Name != volume || v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			var f projectedFile
			var items []corev1.KeyToPath
			switch {
			case src.ConfigMap != nil:
				f, items = projectedFile{kind: "ConfigMap", name: src.ConfigMap.Name}, src.ConfigMap.Items
			case src.Secret != nil:
				f, items = projectedFile{kind: "Secret", name: src.Secret.Name}, src.Secret.Items
			default:
				return nil, fmt.Errorf("unexpected projected source %+v", src)
			}
			for _, it := range items {
				if _, dup := files[it.Path]; dup {
					return nil, fmt.Errorf("two sources project %s", it.Path)
				}
				f.key = it.Key
				files[it.Path] = f
			}
		}
	}
	if _, ok := files["config.yaml"]; !ok {
		return nil, fmt.Errorf("no projected volume at %s holds config.yaml", configDir)
	}
	return files, nil
}

var configPath = regexp.MustCompile(regexp.QuoteMeta(configDir) + `/[^\s"']+`)

// loadRendered loads the rendered config the way the pod would: the
// container's args and env, and every file of the config volume (Secrets
// filled with a stand-in that names them), all under a temporary configDir.
func loadRendered(t *testing.T, objs []object) (config.Config, error) {
	t.Helper()
	dep, err := only[*appsv1.Deployment](objs)
	if err != nil {
		return config.Config{}, err
	}
	var configMaps []object
	for _, cm := range all[*corev1.ConfigMap](objs) {
		if _, ok := cm.Data["config.yaml"]; ok {
			configMaps = append(configMaps, cm)
		}
	}
	cm, err := only[*corev1.ConfigMap](configMaps)
	if err != nil {
		return config.Config{}, fmt.Errorf("ConfigMaps with config.yaml: %w", err)
	}
	files, err := projectedFiles(dep)
	if err != nil {
		return config.Config{}, err
	}
	text := cm.Data["config.yaml"]
	for _, p := range configPath.FindAllString(text, -1) {
		if _, ok := files[strings.TrimPrefix(p, configDir+"/")]; !ok {
			return config.Config{}, fmt.Errorf("config.yaml names %s, which the pod's config volume does not provide", p)
		}
	}
	root := t.TempDir()
	certPEM, keyPEM := selfSigned(t)
	for rel, f := range files {
		content := "password-from-" + f.name + "/" + f.key
		switch {
		case rel == "config.yaml":
			content = strings.ReplaceAll(text, configDir+"/", root+"/")
		case strings.HasSuffix(rel, ".crt"):
			content = certPEM
		case strings.HasSuffix(rel, ".key"):
			content = keyPEM
		}
		p := filepath.Join(root, filepath.FromSlash(path.Clean(rel)))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return config.Config{}, err
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			return config.Config{}, err
		}
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		return config.Config{}, fmt.Errorf("container args must start with serve, got %q", c.Args)
	}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	flags := config.NewFlags(fs)
	args := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		args = append(args, strings.ReplaceAll(a, configDir+"/", root+"/"))
	}
	if err := fs.Parse(args); err != nil {
		return config.Config{}, fmt.Errorf("pelwarden serve would refuse its args %q: %w", c.Args, err)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	return config.Load(config.Sources{Env: lookup, ReadFile: os.ReadFile}, flags)
}

// selfSigned returns a PEM certificate and key, so a loader that parses TLS
// files gets real ones.
func selfSigned(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pelwarden chart test"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}
