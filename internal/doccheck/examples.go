package doccheck

import (
	"fmt"
	"slices"
	"strings"
)

// Example is one fenced block of a page.
type Example struct {
	Page string
	Block
}

// Where names the example as file:line.
func (e Example) Where() string { return e.Block.Where(e.Page) }

// Kinds of example, the second word of a fence's info string: what the
// example is, so a test can load it the way pelwarden or Kubernetes would.
const (
	// KindConfig is a pelwarden config file or a fragment of one.
	KindConfig = "config"
	// KindKube is Kubernetes objects: ScaledObject, TriggerAuthentication,
	// Secret...
	KindKube = "kube"
	// KindValues is Helm values of charts/pelwarden.
	KindValues = "values"
	// KindMetadata is a trigger's metadata map, key: value.
	KindMetadata = "metadata"
	// KindRequest is an Admin API request body, optionally followed by
	// its message's full name.
	KindRequest = "request"
	// KindText is anything not loadable: output, another tool's input.
	KindText = "text"
)

// kinds lists the kinds each checked language accepts.
var kinds = map[string][]string{
	"yaml": {KindConfig, KindKube, KindValues, KindMetadata, KindText},
	"json": {KindRequest, KindText},
}

// Examples returns every fenced block of the pages.
func Examples(pages []Page) []Example {
	var out []Example
	for _, p := range pages {
		blocks, _ := Blocks(p.Text)
		for _, b := range blocks {
			out = append(out, Example{Page: p.Path, Block: b})
		}
	}
	return out
}

// KindProblem says what is wrong with an example's info string, or "": a
// yaml or json block must say what it is, so that it is loaded.
func KindProblem(b Block) string {
	accepted, checked := kinds[b.Lang]
	switch {
	case !checked:
		return ""
	case b.Kind == "":
		return fmt.Sprintf("say what this example is: ```%s %s", b.Lang, strings.Join(accepted, "|"))
	case !slices.Contains(accepted, b.Kind):
		return fmt.Sprintf("```%s %s: %q is not a kind of example; use one of %s",
			b.Lang, b.Kind, b.Kind, strings.Join(accepted, ", "))
	case b.Arg != "" && b.Kind != KindRequest:
		return fmt.Sprintf("```%s %s takes nothing after the kind, got %q", b.Lang, b.Kind, b.Arg)
	}
	return ""
}
