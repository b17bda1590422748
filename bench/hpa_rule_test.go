package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHPADesired(t *testing.T) {
	t.Parallel()
	h := HPA{Target: 5, Min: 1, Max: 10, Tolerance: DefaultHPATolerance}
	cases := map[string]struct {
		metric  float64
		current int32
		want    int32
	}{
		"metric on target keeps the count":                  {20, 4, 4},
		"within the 10% tolerance above keeps the count":    {21.8, 4, 4},
		"within the 10% tolerance below keeps the count":    {18.2, 4, 4},
		"just past the tolerance above scales up to ceil":   {22.5, 4, 5},
		"just past the tolerance below scales down to ceil": {17.5, 4, 4},
		"well below scales down":                            {6, 4, 2},
		"zero metric is clamped to min":                     {0, 3, 1},
		"a large metric is clamped to max":                  {500, 2, 10},
		"a fraction of one target still needs a replica":    {1, 3, 1},
		"no replicas running takes ceil at once":            {11, 0, 3},
		"ghost-inflated metric asks for more replicas":      {100, 4, 10},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, h.Desired(c.metric, c.current), "Desired(%v, %d)", c.metric, c.current)
		})
	}
}

func TestHPADesiredToleranceZeroFollowsEveryChange(t *testing.T) {
	t.Parallel()
	h := HPA{Target: 5, Min: 1, Max: 100, Tolerance: 0}
	require.Equal(t, int32(5), h.Desired(21, 4), "21/5 with no tolerance must round up to 5")
}
