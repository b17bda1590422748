package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The binary reads pods through a core/v1 REST client (kube.NewClient):
// a clientset, or anything else that imports client-go's kubernetes
// package tree, links and registers every API group Kubernetes has, about
// 9 MB of resident memory and half the binary.
func TestTheBinaryLinksNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "k8s.io/api/core/v1", "the list is of this binary's dependencies")
	for _, d := range deps {
		require.False(t, strings.HasPrefix(d, "k8s.io/client-go/kubernetes"), "pelwarden links %s", d)
		require.False(t, strings.HasPrefix(d, "k8s.io/api/") && d != "k8s.io/api/core/v1", "pelwarden links the API group %s", d)
	}
}
