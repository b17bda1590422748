package chart

import (
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestChartNetworkPolicyAdmitsOnlyKEDAsOperatorByDefault: the gRPC port
// answers without a credential, so a default install admits it from
// KEDA's operator pods alone and the metrics port from Prometheus's
// namespace alone; networkPolicy.enabled false renders no policy, and
// more peers are added to the gRPC port, not put in KEDA's place.
func TestChartNetworkPolicyAdmitsOnlyKEDAsOperatorByDefault(t *testing.T) {
	t.Parallel()
	render := func(sets ...string) []*networkingv1.NetworkPolicy {
		stream, err := renderChart(t, chartDir, nil, sets)
		require.NoError(t, err)
		objs, err := decodeManifests(stream)
		require.NoError(t, err)
		return all[*networkingv1.NetworkPolicy](objs)
	}
	keda := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "keda"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "keda-operator"}},
	}
	prometheus := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		PodSelector:       &metav1.LabelSelector{},
	}

	policies := render()
	require.Len(t, policies, 1, "on by default")
	np := policies[0]
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes, "ingress only: egress stays open unless networkPolicy.egress lists rules")
	require.Len(t, np.Spec.Ingress, 2)
	require.Equal(t, "grpc", np.Spec.Ingress[0].Ports[0].Port.String())
	require.Equal(t, []networkingv1.NetworkPolicyPeer{keda}, np.Spec.Ingress[0].From, "the gRPC port from KEDA's operator pods in KEDA's namespace, together")
	require.Equal(t, "http-metrics", np.Spec.Ingress[1].Ports[0].Port.String())
	require.Equal(t, []networkingv1.NetworkPolicyPeer{prometheus}, np.Spec.Ingress[1].From)

	require.Empty(t, render("networkPolicy.enabled=false"), "the documented opt-out renders no policy")

	more := render("networkPolicy.grpcFrom[0].podSelector.matchLabels.app=my-worker")
	require.Len(t, more, 1)
	require.Equal(t, keda, more[0].Spec.Ingress[0].From[0], "KEDA keeps its place")
	require.Equal(t, map[string]string{"app": "my-worker"}, more[0].Spec.Ingress[0].From[1].PodSelector.MatchLabels)
}

// TestNotesSayWhoReachesTheGRPCPort: the install notes name the policy's
// peers, and warn when the policy is off.
func TestNotesSayWhoReachesTheGRPCPort(t *testing.T) {
	t.Parallel()
	on, err := renderNotes(t, nil, nil)
	require.NoError(t, err)
	require.Contains(t, on, "Only KEDA's operator (networkPolicy.keda) reaches the gRPC port")
	require.NotContains(t, on, "WARNING")
	off, err := renderNotes(t, nil, []string{"networkPolicy.enabled=false"})
	require.NoError(t, err)
	require.Contains(t, off, "WARNING: networkPolicy.enabled is false: every pod in the cluster can call\nthe gRPC port without a credential")
}
