package chart

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/pelwarden/pelwarden/internal/config"
)

// renderCase is one set of values and what its render must look like.
type renderCase struct {
	files []string
	sets  []string
	want  want
	// passwords maps a connection to the password pelwarden must read.
	passwords map[string]string
}

func renderCases() map[string]renderCase {
	base := want{
		roleNamespaces: []string{namespace}, serviceAccount: "pw-pelwarden", createsServiceAccount: true,
		apiToken: true, replicas: 1, grpcPort: 9090,
	}
	with := func(change func(*want)) want {
		w := base
		change(&w)
		return w
	}
	return map[string]renderCase{
		"default values": {want: base},
		"every option on": {
			files: []string{allOnValues()},
			want: with(func(w *want) {
				w.tls, w.clusterWide, w.optional = true, true, true
				w.roleNamespaces, w.serviceAccount, w.replicas = nil, "pelwarden-sa", 3
			}),
			passwords: map[string]string{
				"default": "password-from-redis-auth/redis-password",
				"cache":   "password-from-cache-auth/password",
			},
		},
		"roles in listed namespaces": {
			sets: []string{"rbac.namespaces={workers,apps,workers}", "replicaCount=2", "service.grpcPort=19090"},
			want: with(func(w *want) { w.roleNamespaces, w.replicas, w.grpcPort = []string{"workers", "apps"}, 2, 19090 }),
		},
		"network policy off": {
			sets: []string{"networkPolicy.enabled=false"},
			want: with(func(w *want) { w.openPorts = true }),
		},
		"kubernetes source off": {
			sets: []string{"kubernetes.enabled=false"},
			want: with(func(w *want) { w.roleNamespaces, w.apiToken = nil, false }),
		},
		"TLS without client certificates": {
			sets: []string{"grpc.tls.enabled=true", "grpc.tls.secretName=pelwarden-tls"},
			want: with(func(w *want) { w.tls = true }),
		},
		"existing service account": {
			sets: []string{"serviceAccount.create=false", "serviceAccount.name=workers-reader"},
			want: with(func(w *want) { w.serviceAccount, w.createsServiceAccount = "workers-reader", false }),
		},
	}
}

func TestChartLintsClean(t *testing.T) {
	t.Parallel()
	for name, files := range map[string][]string{
		"default values":  nil,
		"every option on": {allOnValues()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"lint", "--strict", chartDir, "--namespace", namespace}, valueArgs(files, nil)...)
			out, errOut, err := helmRun(t, args...)
			require.NoError(t, err, "helm lint --strict should pass:\n%s%s", out, errOut)
			require.Contains(t, out, "0 chart(s) failed")
		})
	}
}

func TestChartRendersObjectsThatDecodeStrictly(t *testing.T) {
	t.Parallel()
	for name, tc := range renderCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stream, err := renderChart(t, chartDir, tc.files, tc.sets)
			require.NoError(t, err)
			objs, err := decodeManifests(stream)
			require.NoError(t, err, "every rendered object should decode strictly into its API type")
			require.NoError(t, checkRender(objs, tc.want))
		})
	}
}

func TestChartConfigIsAcceptedByPelwardensLoader(t *testing.T) {
	t.Parallel()
	for name, tc := range renderCases() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			stream, err := renderChart(t, chartDir, tc.files, tc.sets)
			require.NoError(t, err)
			objs, err := decodeManifests(stream)
			require.NoError(t, err)
			cfg, err := loadRendered(t, objs)
			require.NoError(t, err, "pelwarden serve would refuse the rendered config")
			require.NotEmpty(t, cfg.Redis)
			require.Equal(t, ":9090", cfg.GRPC.Addr, "the container port and probes assume gRPC on 9090")
			require.Equal(t, ":8080", cfg.HTTP.Addr, "the container port and probes assume HTTP on 8080")
			for conn, password := range tc.passwords {
				i := slices.IndexFunc(cfg.Redis, func(r config.Redis) bool { return r.Name == conn })
				require.NotEqual(t, -1, i, "connection %s should be configured", conn)
				require.Equal(t, password, cfg.Redis[i].Password, "connection %s should read its password from its existingSecret", conn)
			}
		})
	}
}

func TestConfigChangeRollsPodsAndOtherChangesDoNot(t *testing.T) {
	t.Parallel()
	checksum := func(sets ...string) string {
		stream, err := renderChart(t, chartDir, nil, sets)
		require.NoError(t, err)
		objs, err := decodeManifests(stream)
		require.NoError(t, err)
		dep, err := only[*appsv1.Deployment](objs)
		require.NoError(t, err)
		return dep.Spec.Template.Annotations["checksum/config"]
	}
	base := checksum()
	require.NotEqual(t, base, checksum("log.level=debug"), "a config change should change the pod template")
	require.Equal(t, base, checksum("replicaCount=2"), "a change outside the config should not roll pods through the checksum")
}

// The loader check above proves nothing unless it can fail: a config that
// the schema cannot judge (one duration against another) but pelwarden
// refuses must be reported.
func TestLoaderCheckCatchesAConfigPelwardenRefuses(t *testing.T) {
	t.Parallel()
	stream, err := renderChart(t, chartDir, nil, []string{"hygiene.leaseTTL=5s"})
	require.NoError(t, err)
	objs, err := decodeManifests(stream)
	require.NoError(t, err)
	_, err = loadRendered(t, objs)
	var cfgErr *config.Error
	require.ErrorAs(t, err, &cfgErr)
	require.ErrorContains(t, err, "hygiene.leaseTTL")
}

func TestWaitReplicasReachesTheConnectionConfig(t *testing.T) {
	t.Parallel()
	stream, err := renderChart(t, chartDir, nil, []string{"redis[0].name=default", "redis[0].addr=redis:6379", "redis[0].waitReplicas=2", "redis[0].waitTimeout=3s",
		"redis[0].idleBefore72=ghost"})
	require.NoError(t, err)
	objs, err := decodeManifests(stream)
	require.NoError(t, err)
	cfg, err := loadRendered(t, objs)
	require.NoError(t, err)
	require.Equal(t, 2, cfg.Redis[0].WaitReplicas)
	require.Equal(t, 3*time.Second, cfg.Redis[0].WaitTimeout)
	require.Equal(t, config.IdleGhost, cfg.Redis[0].IdleBefore72)
}
