package findings

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

func TestReadersAndReleasedEntriesAreFindings(t *testing.T) {
	t.Parallel()
	since := time.Date(2027, 1, 15, 8, 0, 0, 0, time.UTC)
	claim := Claim{ID: "5-0", From: "", To: "reader-1", Deliveries: 2, At: since.Add(time.Minute)}
	cases := map[string]struct {
		released int64
		readers  *Readers
		kinds    []Kind
		mention  []string
	}{
		"nothing to say": {readers: &Readers{Since: since}},
		"released in a group no hygiene looks after": {released: 5, kinds: []Kind{Released},
			mention: []string{"5 entries were released", "count as work", "never touches them", "no hygiene target"}},
		"released where no reader was seen to claim": {released: 5, readers: &Readers{Since: since}, kinds: []Kind{Released},
			mention: []string{"no reader of this group was seen to claim since 2027-01-15T08:00:00Z", "stay pending for good"}},
		"claimingReaders set, no claim seen yet": {released: 2, readers: &Readers{Since: since, Declared: true}, kinds: []Kind{Released},
			mention: []string{"claimingReaders says the workers claim, but none was seen to"}},
		"readers claim, undeclared": {readers: &Readers{Since: since, Claims: 3, Last: claim}, kinds: []Kind{ClaimingReaders},
			mention: []string{"3 entries were seen to move", "5-0, went from no owner (released with XNACK) to reader-1", "none is given back twice",
				"does not set claimingReaders: true"}},
		"readers claim and take released entries": {released: 1, readers: &Readers{Since: since, Claims: 1, Last: claim, Declared: true},
			kinds: []Kind{ClaimingReaders, Released}, mention: []string{"last seen to claim at 2027-01-15T08:01:00Z"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fs := fromReaders(&liveness.Snapshot{ReleasedPending: tc.released}, tc.readers)
			var kinds []Kind
			text := ""
			for _, f := range fs {
				kinds = append(kinds, f.Kind)
				text += f.Detail + "\n"
				require.NotEqual(t, "kind", f.Kind.String()[:4], "every kind has a name")
				require.NotZero(t, f.Kind.Proto(), "every kind is in the API")
			}
			require.Equal(t, tc.kinds, kinds)
			for _, m := range tc.mention {
				require.Contains(t, text, m)
			}
		})
	}
}
