package console

// Charts as inline SVG, drawn on the server: the console sends no script
// and its Content-Security-Policy allows none, nor inline style
// attributes. A chart is presentation attributes and classes only (colours
// and sizes in console.css), with a title and a description the SVG's
// role="img" is labelled by, axis labels, a legend, and the same numbers
// in a table under it (for screen readers, and to read exact values).

import (
	"html/template"
	"math"
	"strconv"
	"strings"
)

// chartKind is how a chart draws its series.
type chartKind int

const (
	// barsGrouped draws one bar per series side by side in each bucket.
	barsGrouped chartKind = iota
	// barsStacked stacks the series' bars in each bucket.
	barsStacked
	// lines draws one line per series, a dot per value.
	lines
)

// chartSeries is one named series, one value per bucket.
type chartSeries struct {
	Name   string
	Values []float64
}

// chartOpts describes a chart. ID must be unique on the page and safe in
// an id attribute (letters, digits, '-').
type chartOpts struct {
	ID, Title, Desc string
	// XLabel and YLabel name the axes; Unit follows a value in the
	// table's header and the bars' tooltips ("" for counts).
	XLabel, YLabel, Unit string
	// Labels names the buckets, one per value.
	Labels []string
	Kind   chartKind
}

// Chart geometry in viewBox units. The SVG scales to its container's
// width (console.css), so 1 unit is about 1 CSS pixel at phone width.
const (
	chartW, chartH                       = 360.0, 200.0
	padLeft, padRight, padTop, padBottom = 42.0, 8.0, 10.0, 40.0
	seriesClasses                        = 6 // console.css colours .s0 … .s5
)

// barChart renders a chart as a <figure>: heading, the SVG, a legend and
// a <details> table of the same numbers.
func barChart(series []chartSeries, o chartOpts) template.HTML {
	esc := template.HTMLEscapeString
	var b strings.Builder
	n := len(o.Labels)
	plotW, plotH := chartW-padLeft-padRight, chartH-padTop-padBottom
	top := 0.0
	for i := 0; i < n; i++ {
		sum := 0.0
		for _, s := range series {
			v := s.Values[i]
			if o.Kind == barsStacked {
				sum += v
			} else {
				sum = math.Max(sum, v)
			}
		}
		top = math.Max(top, sum)
	}
	ymax := niceMax(top)
	y := func(v float64) float64 { return padTop + plotH - v/ymax*plotH }
	bw := plotW / math.Max(1, float64(n))

	b.WriteString(`<figure class="chart" id="` + esc(o.ID) + `" data-testid="chart" data-chart="` + esc(o.ID) + `">`)
	b.WriteString(`<figcaption><h2>` + esc(o.Title) + `</h2></figcaption>`)
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" class="chart-svg" viewBox="0 0 ` + num(chartW) + ` ` + num(chartH) +
		`" role="img" aria-labelledby="` + esc(o.ID) + `-title ` + esc(o.ID) + `-desc">`)
	b.WriteString(`<title id="` + esc(o.ID) + `-title">` + esc(o.Title) + `</title>`)
	b.WriteString(`<desc id="` + esc(o.ID) + `-desc">` + esc(o.Desc) + `</desc>`)
	// Grid and y ticks: 0, half, top.
	for _, f := range []float64{0, 0.5, 1} {
		v := ymax * f
		if f == 0.5 && o.Unit == "" && v != math.Trunc(v) {
			continue // counts: no tick at 2.5
		}
		yy := y(v)
		b.WriteString(`<line class="grid" x1="` + num(padLeft) + `" x2="` + num(chartW-padRight) + `" y1="` + num(yy) + `" y2="` + num(yy) + `"/>`)
		b.WriteString(`<text class="tick" x="` + num(padLeft-4) + `" y="` + num(yy+3) + `" text-anchor="end">` + esc(short(v)) + `</text>`)
	}
	// Axes and their labels.
	b.WriteString(`<line class="axis" x1="` + num(padLeft) + `" x2="` + num(padLeft) + `" y1="` + num(padTop) + `" y2="` + num(padTop+plotH) + `"/>`)
	b.WriteString(`<line class="axis" x1="` + num(padLeft) + `" x2="` + num(chartW-padRight) + `" y1="` + num(padTop+plotH) + `" y2="` + num(padTop+plotH) + `"/>`)
	b.WriteString(`<text class="axis-label" data-testid="y-label" transform="translate(11 ` + num(padTop+plotH/2) + `) rotate(-90)" text-anchor="middle">` +
		esc(o.YLabel) + `</text>`)
	b.WriteString(`<text class="axis-label" data-testid="x-label" x="` + num(padLeft+plotW/2) + `" y="` + num(chartH-4) + `" text-anchor="middle">` +
		esc(o.XLabel) + `</text>`)
	// X ticks: at most 4 labels, first and last included.
	for _, i := range tickIndexes(n, 4) {
		x := padLeft + bw*(float64(i)+0.5)
		anchor := "middle"
		switch {
		case i == 0 && n > 1:
			anchor, x = "start", padLeft
		case i == n-1 && n > 1:
			anchor, x = "end", chartW-padRight
		}
		b.WriteString(`<text class="tick" x="` + num(x) + `" y="` + num(padTop+plotH+13) + `" text-anchor="` + anchor + `">` + esc(o.Labels[i]) + `</text>`)
	}
	// Data.
	unit := ""
	if o.Unit != "" {
		unit = " " + o.Unit
	}
	// mark writes one bar or dot: <tag attrs class data-…><title>…</title></tag>.
	mark := func(tag, attrs, class string, si, i int, v float64) {
		b.WriteString(`<` + tag + ` ` + attrs + ` class="` + class + ` s` + strconv.Itoa(si%seriesClasses) + `" data-series="` + esc(series[si].Name) +
			`" data-bucket="` + esc(o.Labels[i]) + `" data-value="` + num(v) + `"><title>` + esc(o.Labels[i]+" · "+series[si].Name+": "+short(v)+unit) +
			`</title></` + tag + `>`)
	}
	switch o.Kind {
	case lines:
		for si, s := range series {
			pts := make([]string, n)
			for i, v := range s.Values {
				pts[i] = num(padLeft+bw*(float64(i)+0.5)) + "," + num(y(v))
			}
			b.WriteString(`<polyline class="line s` + strconv.Itoa(si%seriesClasses) + `" fill="none" points="` + strings.Join(pts, " ") + `"/>`)
			for i, v := range s.Values {
				mark("circle", `cx="`+num(padLeft+bw*(float64(i)+0.5))+`" cy="`+num(y(v))+`" r="1.8"`, "dot", si, i, v)
			}
		}
	default:
		gap := bw * 0.15
		for i := 0; i < n; i++ {
			base := 0.0
			for si, s := range series {
				v := s.Values[i]
				x, w := padLeft+bw*float64(i)+gap/2, bw-gap
				h := plotH * v / ymax
				yy := y(v)
				if o.Kind == barsStacked {
					yy = y(base + v)
					base += v
				} else {
					w /= float64(len(series))
					x += w * float64(si)
				}
				mark("rect", `x="`+num(x)+`" y="`+num(yy)+`" width="`+num(math.Max(w, 0.5))+`" height="`+num(h)+`"`, "bar", si, i, v)
			}
		}
	}
	b.WriteString(`</svg>`)
	// Legend.
	b.WriteString(`<ul class="legend" data-testid="legend">`)
	for si, s := range series {
		b.WriteString(`<li><span class="swatch s` + strconv.Itoa(si%seriesClasses) + `"></span>` + esc(s.Name) + `</li>`)
	}
	b.WriteString(`</ul>`)
	// The same numbers as a table.
	b.WriteString(`<details class="chart-table"><summary>Numbers of “` + esc(o.Title) + `”</summary><div class="table-scroll"><table data-testid="chart-table">`)
	b.WriteString(`<thead><tr><th scope="col">` + esc(o.XLabel) + `</th>`)
	for _, s := range series {
		h := s.Name
		if o.Unit != "" {
			h += " (" + o.Unit + ")"
		}
		b.WriteString(`<th scope="col">` + esc(h) + `</th>`)
	}
	b.WriteString(`</tr></thead><tbody>`)
	for i := 0; i < n; i++ {
		b.WriteString(`<tr><th scope="row">` + esc(o.Labels[i]) + `</th>`)
		for _, s := range series {
			b.WriteString(`<td data-value="` + num(s.Values[i]) + `">` + esc(short(s.Values[i])) + `</td>`)
		}
		b.WriteString(`</tr>`)
	}
	b.WriteString(`</tbody></table></div></details></figure>`)
	return template.HTML(b.String()) //nolint:gosec // every text above is escaped
}

// num writes a coordinate or a value: at most 2 decimals, no exponent.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
}

// short writes a value for reading: whole numbers as such, others with
// one decimal, thousands as "1.2k".
func short(v float64) string {
	switch {
	case v >= 10000:
		return strconv.FormatFloat(math.Round(v/100)/10, 'f', -1, 64) + "k"
	case v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// niceMax is the smallest 1, 2 or 5 × 10ⁿ at or above v (1 for v ≤ 1), so
// the axis ticks are round numbers.
func niceMax(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// tickIndexes picks at most k bucket indexes to label, evenly spread, the
// first and the last included.
func tickIndexes(n, k int) []int {
	if n <= 0 {
		return nil
	}
	if n <= k {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, 0, k)
	for j := 0; j < k; j++ {
		out = append(out, int(math.Round(float64(j)*float64(n-1)/float64(k-1))))
	}
	return out
}
