package docgen

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBlockReplacesOnlyTheLinesBetweenItsMarkers(t *testing.T) {
	t.Parallel()
	b := Block{Path: "docs/page.md", Source: "bench/run.json", Content: []byte("new\ntable\n")}
	begin := b.begin() + "\n"
	cases := map[string]struct {
		page    string
		want    string
		wantErr string
	}{
		"an old part is replaced": {
			page: "intro\n" + begin + "old\n" + blockEnd + "\nafter\n",
			want: "intro\n" + begin + "new\ntable\n" + blockEnd + "\nafter\n",
		},
		"an empty part is filled": {
			page: begin + blockEnd + "\n",
			want: begin + "new\ntable\n" + blockEnd + "\n",
		},
		"no begin marker":               {page: "intro\n" + blockEnd + "\n", wantErr: "has no line"},
		"no end marker after begin":     {page: blockEnd + "\n" + begin + "old\n", wantErr: "after"},
		"another source's begin marker": {page: "<!-- make generate writes from here to the end marker, from other.json. -->\n" + blockEnd, wantErr: "has no line"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := b.Into([]byte(tc.page))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
		})
	}
}
