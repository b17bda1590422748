package app

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
)

// TestTextFamiliesWriteWhatExpfmtWrites: the text path writes, byte for
// byte, what expfmt's text encoder writes of the same rows, with label
// values and help that need escaping, every kind of value, a family of
// counters, and an empty set that writes nothing.
func TestTextFamiliesWriteWhatExpfmtWrites(t *testing.T) {
	t.Parallel()
	names := []string{"stream", "conn", "group"}
	rows := [][]string{
		{`jobs`, `default`, `workers`},
		{"we\"ird\\str\neam", `c`, `g{x="y"}`},
		{``, `ünïcode`, `g`},
	}
	values := []float64{0, 12345678901, -0.5, math.Inf(1), math.Inf(-1), math.NaN(), 1e-300, 3}
	write := func(f families) {
		set := f.rows(names, len(rows), func(i int) []string { return rows[i] })
		require.NoError(t, set.family("pelwarden_a", "A help\\ with \"quotes\"\nand a newline.", dto.MetricType_GAUGE,
			func(i int) float64 { return values[i] }))
		require.NoError(t, set.family("pelwarden_b_total", "B.", dto.MetricType_COUNTER, func(i int) float64 { return values[i+3] }))
		require.NoError(t, set.family("pelwarden_c", "C.", dto.MetricType_GAUGE, func(i int) float64 { return values[i+5] }))
		empty := f.rows(names, 0, func(int) []string { return nil })
		require.NoError(t, empty.family("pelwarden_empty", "E.", dto.MetricType_GAUGE, func(int) float64 { return 1 }))
	}
	var want, got bytes.Buffer
	write(dtoFamilies{expfmt.NewEncoder(&want, expfmt.NewFormat(expfmt.TypeTextPlain))})
	w := bufio.NewWriter(&got)
	write(&textFamilies{w: w})
	require.NoError(t, w.Flush())
	require.NotEmpty(t, want.String())
	require.Equal(t, want.String(), got.String())
}

// TestAProtobufScrapeHasTheSameSeriesAsTheText: a scraper asking for
// protobuf gets every per-target family through expfmt, series for
// series as the text page has them.
func TestAProtobufScrapeHasTheSameSeriesAsTheText(t *testing.T) {
	t.Parallel()
	h, _ := exposed(t)
	text := scrape(t, h, http.Header{})
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, expfmt.TypeProtoDelim, expfmt.ResponseFormat(rec.Header()).FormatType())
	dec := expfmt.NewDecoder(rec.Body, expfmt.ResponseFormat(rec.Header()))
	proto := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		proto[mf.GetName()] = &mf
	}
	for _, name := range []string{"pelwarden_ghost_pending_entries", "pelwarden_lag_entries", "pelwarden_scaler_reported_value", "pelwarden_hygiene_scans_total"} {
		require.NotNil(t, proto[name], name)
		require.Equal(t, text[name].GetType(), proto[name].GetType(), name)
		require.Equal(t, series(text[name]), series(proto[name]), name)
	}
}
