package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/pelwarden/pelwarden/internal/doccheck"
)

// kubeExample decodes a `yaml kube` example: KEDA's and cert-manager's
// objects against their CRDs, every other object strictly into its API
// type, and the metadata of each external trigger of a ScaledObject
// through pelwarden's parser.
func kubeExample(body string) error {
	docs, err := splitDocuments(body)
	if err != nil {
		return err
	}
	var errs []string
	for i, doc := range docs {
		if err := kubeDocument(doc); err != nil {
			errs = append(errs, fmt.Sprintf("document %d: %v", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func kubeDocument(doc []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(head.APIVersion, certManagerModule.group+"/"):
		_, err := certManagerModule.decode(doc)
		return err
	case !strings.HasPrefix(head.APIVersion, "keda.sh/"):
		_, err := decodeStrict(doc)
		return err
	}
	obj, err := decodeKEDA(doc)
	if err != nil || obj.kind != "ScaledObject" {
		return err
	}
	ns := obj.meta.Namespace
	if ns == "" {
		ns = "default"
	}
	for i, tr := range triggers(obj) {
		if tr.typ != "external" && tr.typ != "external-push" {
			continue
		}
		if err := doccheck.Trigger(tr.metadata, ns); err != nil {
			return fmt.Errorf("ScaledObject %s: triggers[%d]: %w", obj.meta.Name, i, err)
		}
	}
	return nil
}

// valuesExample checks a `yaml values` example against values.schema.json
// and renders the chart with it: every object decodes strictly, and the
// config.yaml it renders loads in pelwarden.
func valuesExample(t *testing.T, body string) error {
	t.Helper()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		return err
	}
	stream, err := renderChart(t, chartDir, []string{file}, nil)
	if err != nil {
		return err
	}
	objs, err := decodeManifests(stream)
	if err != nil {
		return err
	}
	_, err = loadRendered(t, objs)
	return err
}

// docExampleProblems loads the kube and values examples of the pages; the
// main module's doccheck tests load the rest.
func docExampleProblems(t *testing.T, pages []doccheck.Page) []string {
	t.Helper()
	var out []string
	for _, e := range doccheck.Examples(pages) {
		if e.Lang != "yaml" || doccheck.KindProblem(e.Block) != "" {
			continue // reported by the doccheck tests
		}
		var err error
		switch e.Kind {
		case doccheck.KindKube:
			err = kubeExample(e.Body)
		case doccheck.KindValues:
			err = valuesExample(t, e.Body)
		default:
			continue
		}
		if err != nil {
			out = append(out, e.Where()+": yaml "+e.Kind+": "+strings.ReplaceAll(err.Error(), "\n", "\n\t"))
		}
	}
	return out
}

// Every `yaml kube` example of README.md, docs/ and the chart README
// decodes as KEDA and Kubernetes would take it, with trigger metadata
// pelwarden accepts, and every `yaml values` example passes the chart's
// schema and renders a pelwarden that loads.
func TestDocKubeAndValuesExamplesLoad(t *testing.T) {
	t.Parallel()
	pages, err := doccheck.Pages(repoRoot)
	require.NoError(t, err)
	if got := docExampleProblems(t, pages); len(got) > 0 {
		t.Errorf("examples that do not load:\n%s", strings.Join(got, "\n"))
	}
}

// The kube and values checks are what make the test above mean anything:
// each broken example must be reported at its file and line.
func TestDocKubeAndValuesCheckRejectsBrokenExamples(t *testing.T) {
	t.Parallel()
	const scaled = `apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: jobs-worker
  namespace: jobs
spec:
  scaleTargetRef:
    name: jobs-worker
  triggers:
    - type: external
      metadata:
        scalerAddress: pelwarden.pelwarden.svc:9090
        stream: jobs
        consumerGroup: workers
`
	for name, tc := range map[string]struct {
		info, body string
		want       string // "" when the example loads
	}{
		"a ScaledObject pelwarden accepts": {"yaml kube", scaled + "        backlogCount: \"5\"\n", ""},
		"a ScaledObject with a misspelled field": {
			"yaml kube", strings.Replace(scaled, "scaleTargetRef", "scaleTargetRf", 1), ".spec.scaleTargetRf: unknown field",
		},
		"a ScaledObject with an unknown trigger key": {
			"yaml kube", scaled + "        backlogCont: \"5\"\n", "metadata backlogCont: pelwarden does not read it",
		},
		"a ScaledObject with a bad trigger value": {
			"yaml kube", scaled + "        ghostIdleSeconds: \"-3\"\n", `metadata "ghostIdleSeconds"`,
		},
		"an unquoted trigger value": {"yaml kube", scaled + "        backlogCount: 5\n", "must be a string"},
		"a TriggerAuthentication with a misspelled field": {
			"yaml kube", "apiVersion: keda.sh/v1alpha1\nkind: TriggerAuthentication\nmetadata: {name: a}\nspec:\n  secretTargetRefs: []\n",
			".spec.secretTargetRefs: unknown field",
		},
		"a Secret with a misspelled field": {
			"yaml kube", "apiVersion: v1\nkind: Secret\nmetadata: {name: a}\nstringdata: {a: b}\n", `unknown field "stringdata"`,
		},
		"a fragment that is no object": {"yaml kube", "triggers:\n  - type: external\n", "Object 'Kind' is missing"},
		"values the chart takes":       {"yaml values", "serviceMonitor: {enabled: true}\n", ""},
		"values the schema refuses":    {"yaml values", "scaler: {freshnes: 1s}\n", "'freshnes' not allowed"},
		"values the schema refuses by type": {
			"yaml values", "hygiene: {batchSize: 20000}\n", "/hygiene/batchSize",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			page := doccheck.Page{Path: "docs/page.md", Text: "# Page\n\n```" + tc.info + "\n" + tc.body + "```\n"}
			got := docExampleProblems(t, []doccheck.Page{page})
			if tc.want == "" {
				require.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			require.Contains(t, got[0], "docs/page.md:3: ")
			require.Contains(t, got[0], tc.want)
		})
	}
}
