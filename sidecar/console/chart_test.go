package console

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idempotent-claim/idempotent-claim/sidecar/claim"
)

// ChartMark is one bar or dot of a chart: its series, bucket and value.
type ChartMark struct {
	Series, Bucket string
	Value          float64
}

// ChartFacts is what CheckChart read of one chart.
type ChartFacts struct {
	ID, Title, Desc string
	Marks           []ChartMark
	// Cells are the table's data-value cells, row by row.
	Cells []float64
}

// CheckChart parses one chart's markup (a <figure> as barChart writes it)
// as strict XML and refuses what the console's CSP or the design forbids:
// a style attribute, a script, an event handler, any reference outside the
// page (href, src, url(…)); it requires the SVG to be role="img",
// labelled by its <title> and <desc>. It returns what it read.
func CheckChart(markup string) (ChartFacts, error) {
	d := xml.NewDecoder(strings.NewReader(markup))
	d.Strict = true
	var f ChartFacts
	var stack []string
	var labelledBy string
	ids := map[string]string{} // id → element
	texts := map[string]string{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return f, fmt.Errorf("not well-formed XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			name := t.Name.Local
			stack = append(stack, name)
			if name == "script" || name == "style" || name == "foreignObject" || name == "image" || name == "use" {
				return f, fmt.Errorf("element <%s> is not allowed", name)
			}
			attrs := map[string]string{}
			for _, a := range t.Attr {
				n := a.Name.Local
				attrs[n] = a.Value
				switch {
				case n == "style":
					return f, fmt.Errorf("<%s> has a style attribute", name)
				case strings.HasPrefix(strings.ToLower(n), "on"):
					return f, fmt.Errorf("<%s> has an event handler %s", name, n)
				case n == "href" || n == "src":
					return f, fmt.Errorf("<%s> refers elsewhere (%s)", name, n)
				case strings.Contains(a.Value, "url("):
					return f, fmt.Errorf("<%s> %s refers to a url()", name, n)
				case n == "xmlns" && a.Value != "http://www.w3.org/2000/svg":
					return f, fmt.Errorf("<%s> has an unexpected namespace", name)
				}
			}
			if id := attrs["id"]; id != "" {
				ids[id] = name
			}
			if name == "figure" {
				f.ID = attrs["id"]
			}
			if name == "svg" {
				if attrs["role"] != "img" {
					return f, errors.New("the svg is not role=img")
				}
				labelledBy = attrs["aria-labelledby"]
			}
			if v, ok := attrs["data-value"]; ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return f, fmt.Errorf("data-value %q is no number", v)
				}
				if name == "td" {
					f.Cells = append(f.Cells, x)
				} else {
					f.Marks = append(f.Marks, ChartMark{Series: attrs["data-series"], Bucket: attrs["data-bucket"], Value: x})
				}
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) >= 2 && stack[len(stack)-2] == "svg" {
				texts[stack[len(stack)-1]] += string(t)
			}
		}
	}
	f.Title, f.Desc = strings.TrimSpace(texts["title"]), strings.TrimSpace(texts["desc"])
	if f.Title == "" || f.Desc == "" {
		return f, errors.New("the svg has no <title> or no <desc>")
	}
	for _, id := range strings.Fields(labelledBy) {
		if el := ids[id]; el != "title" && el != "desc" {
			return f, fmt.Errorf("aria-labelledby names %q, which is no title or desc of the chart", id)
		}
	}
	if len(strings.Fields(labelledBy)) != 2 {
		return f, errors.New("the svg is not labelled by its title and desc")
	}
	return f, nil
}

func TestBarChartMarkup(t *testing.T) {
	labels := []string{"10:00", "11:00", "12:00", "13:00"}
	for _, kind := range []chartKind{barsGrouped, barsStacked, lines} {
		series := []chartSeries{
			{Name: "provider retries", Values: []float64{0, 3, 12, 1}},
			{Name: `"quoted" <&> name`, Values: []float64{5, 0, 7.5, 2}},
		}
		out := string(barChart(series, chartOpts{ID: "chart-x", Title: "Duplicates <stopped>", Desc: "desc & more",
			XLabel: "Time (UTC)", YLabel: "count", Labels: labels, Kind: kind}))
		f, err := CheckChart(out)
		require.NoError(t, err, "kind %d:\n%s", kind, out)
		require.Equal(t, "chart-x", f.ID)
		require.Equal(t, "Duplicates <stopped>", f.Title)
		require.Equal(t, "desc & more", f.Desc)
		var want []ChartMark
		for _, s := range series {
			for i, v := range s.Values {
				want = append(want, ChartMark{Series: s.Name, Bucket: labels[i], Value: v})
			}
		}
		require.ElementsMatch(t, want, f.Marks, "one mark per value, with its seeded value")
		var cells []float64
		for i := range labels {
			for _, s := range series {
				cells = append(cells, s.Values[i])
			}
		}
		require.Equal(t, cells, f.Cells, "the table holds the same numbers")
		require.Contains(t, out, `data-testid="x-label"`)
		require.Contains(t, out, `data-testid="y-label"`)
	}
}

func TestCheckChartRefuses(t *testing.T) {
	ok := string(barChart([]chartSeries{{Name: "a", Values: []float64{1}}}, chartOpts{ID: "c", Title: "T", Desc: "D",
		Labels: []string{"x"}}))
	_, err := CheckChart(ok)
	require.NoError(t, err)
	for name, bad := range map[string]string{
		"style":  strings.Replace(ok, `<rect `, `<rect style="fill:red" `, 1),
		"script": strings.Replace(ok, `</svg>`, `<script>1</script></svg>`, 1),
		"href":   strings.Replace(ok, `<rect `, `<rect href="http://x.example/" `, 1),
		"broken": strings.Replace(ok, `</svg>`, ``, 1),
		"desc":   strings.Replace(ok, `<desc `, `<p `, 1),
	} {
		_, err := CheckChart(bad)
		require.Error(t, err, name)
	}
}

func TestBucketsAndNiceMax(t *testing.T) {
	require.Equal(t, 1.0, niceMax(0))
	require.Equal(t, 5.0, niceMax(3))
	require.Equal(t, 20.0, niceMax(12))
	require.Equal(t, 100.0, niceMax(100))
	require.Equal(t, []int{0, 8, 15, 23}, tickIndexes(24, 4))
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	var hours []claim.HourStats
	for i := 0; i < 12; i++ {
		hours = append(hours, claim.HourStats{Hour: start.Add(time.Duration(i) * time.Hour), Deliveries: 1,
			Dispatched: 1, DispatchLagSumMs: float64(i), DispatchLagMaxMs: float64(i), Causes: map[string]int64{"x": 1}})
	}
	bs := buckets(hours, statsRange{Bucket: 6, Layout: "15h"})
	require.Len(t, bs, 2)
	require.Equal(t, int64(6), bs[1].Deliveries)
	require.Equal(t, 11.0, bs[1].DispatchLagMaxMs)
	require.Equal(t, int64(6), bs[0].Causes["x"])
	require.Equal(t, "06h", bs[1].Label)
}
