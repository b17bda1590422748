package admin

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestCheckTriggerRefusesFieldsPastTheirBoundsBeforeParsing: CheckTrigger
// takes the same metadata as the scaler and is bounded the same way,
// before its metadata reaches the parser (and any pattern the compiler).
func TestCheckTriggerRefusesFieldsPastTheirBoundsBeforeParsing(t *testing.T) {
	t.Parallel()
	checked := 0
	s := &Server{opts: Options{CheckTrigger: func(context.Context, string, map[string]string) CheckAnswer { checked++; return CheckAnswer{} }}}
	huge := strings.Repeat("x", 1<<20)
	for field, req := range map[string]*pelwardenv1.CheckTriggerRequest{
		"namespace":              {Namespace: huge, Metadata: map[string]string{"stream": "jobs"}},
		`metadata["ownerMatch"]`: {Namespace: "jobs", Metadata: map[string]string{"ownerMatch": "regex:(?P<owner>x)" + huge}},
	} {
		_, err := s.CheckTrigger(context.Background(), req)
		requireInvalid(t, err, field)
		require.Less(t, len(err.Error()), 200)
	}
	require.Zero(t, checked, "nothing reached the parser")
	res, err := s.CheckTrigger(context.Background(), &pelwardenv1.CheckTriggerRequest{Namespace: "jobs", Metadata: map[string]string{"stream": "jobs"}})
	require.NoError(t, err)
	require.Equal(t, "OK", res.GetCode())
	require.Equal(t, 1, checked)
}
