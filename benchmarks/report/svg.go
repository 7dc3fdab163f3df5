package report

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Plots are written by hand as SVG with the standard library: the tool
// then needs no plotting module, and the runtime's users inherit
// nothing from it.

// plot geometry, in SVG user units (pixels).
const (
	plotW, plotH               = 760, 460
	marginL, marginR           = 84, 24
	marginT, marginB           = 48, 64
	innerW                     = plotW - marginL - marginR
	innerH                     = plotH - marginT - marginB
	legendLine, legendFontSize = 18, 12
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// series is one line of a plot: a transport at a PE count.
type series struct {
	label  string
	points []Figure // sorted by size
}

// WriteSVGs writes one plot per suite measured at more than one size,
// for latency and bandwidth figures: value against size (both axes
// logarithmic), one line per transport (and PE count), each point with
// its min-max bar, and the limit drawn as a dashed line of the same
// colour. It returns the files written.
func WriteSVGs(dir string, run Run, figs []Figure) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	type key struct {
		suite  string
		metric Metric
	}
	groups := map[key][]Figure{}
	var order []key
	for _, f := range figs {
		if f.Metric != Latency && f.Metric != Bandwidth {
			continue
		}
		k := key{f.Suite, f.Metric}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f)
	}
	var files []string
	for _, k := range order {
		g := groups[k]
		sizes := map[int]bool{}
		for _, f := range g {
			sizes[f.Size] = true
		}
		if len(sizes) < 2 {
			continue
		}
		name := filepath.Join(dir, k.suite+"-"+string(k.metric)+".svg")
		if err := os.WriteFile(name, []byte(svgPlot(k.suite, k.metric, run, g)), 0o644); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	return files, nil
}

func svgPlot(suite string, m Metric, run Run, figs []Figure) string {
	bySeries := map[string][]Figure{}
	var labels []string
	for _, f := range figs {
		l := fmt.Sprintf("%s, %d PEs", f.Transport, f.PEs)
		if _, ok := bySeries[l]; !ok {
			labels = append(labels, l)
		}
		bySeries[l] = append(bySeries[l], f)
	}
	var ss []series
	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, l := range labels {
		pts := bySeries[l]
		slices.SortFunc(pts, func(a, b Figure) int { return cmp.Compare(a.Size, b.Size) })
		ss = append(ss, series{label: l, points: pts})
		for _, p := range pts {
			x := math.Log2(float64(max(p.Size, 1)))
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			for _, y := range []float64{p.Min, p.Max, p.Value, p.Limit} {
				if y > 0 {
					ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
				}
			}
		}
	}
	lo, hi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if hi <= lo {
		hi = lo + 1
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	px := func(size int) float64 {
		return marginL + (math.Log2(float64(max(size, 1)))-xmin)/(xmax-xmin)*innerW
	}
	py := func(v float64) float64 {
		return marginT + innerH - (math.Log10(v)-lo)/(hi-lo)*innerH
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n",
		plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	title := fmt.Sprintf("goshbench %s: %s (%s) against size", suite, m, m.Unit())
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(title))
	sub := fmt.Sprintf("%s, %s, %s; median of %d repetitions, bars min-max, dashed: limit", run.CPU, run.GoVersion, run.Timestamp, run.Reps)
	fmt.Fprintf(&b, `<text x="%d" y="38" font-size="11" fill="#555">%s</text>`+"\n", marginL, html.EscapeString(sub))

	// Grid and y labels at each decade.
	for d := lo; d <= hi; d++ {
		y := py(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, y, marginL+innerW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n",
			marginL-6, y+4, html.EscapeString(tickLabel(m, math.Pow(10, d))))
	}
	// x labels at each power of two, thinned to at most 12 labels.
	step := 1
	for (int(xmax-xmin)+step)/step > 12 {
		step *= 2
	}
	for e := int(xmin); e <= int(xmax); e++ {
		x := px(1 << e)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", x, marginT, x, marginT+innerH)
		if (e-int(xmin))%step == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>`+"\n",
				x, marginT+innerH+16, SizeString(1<<e))
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", marginL, marginT, innerW, innerH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" text-anchor="middle">message size (bytes)</text>`+"\n",
		marginL+innerW/2, plotH-18)
	fmt.Fprintf(&b, `<text x="16" y="%d" font-size="12" text-anchor="middle" transform="rotate(-90 16 %d)">%s (%s)</text>`+"\n",
		marginT+innerH/2, marginT+innerH/2, m, m.Unit())

	for i, s := range ss {
		c := palette[i%len(palette)]
		var line, limit []string
		for _, p := range s.points {
			line = append(line, fmt.Sprintf("%.1f,%.1f", px(p.Size), py(p.Value)))
			limit = append(limit, fmt.Sprintf("%.1f,%.1f", px(p.Size), py(p.Limit)))
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
			strings.Join(limit, " "), c)
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(line, " "), c)
		for _, p := range s.points {
			x := px(p.Size)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, py(p.Min), x, py(p.Max), c)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s %s: %s (limit %s %s, ratio %.3f)</title></circle>`+"\n",
				x, py(p.Value), c, html.EscapeString(s.label), SizeString(p.Size), html.EscapeString(ValueString(m, p.Value)),
				html.EscapeString(p.LimitName), html.EscapeString(ValueString(m, p.Limit)), p.Ratio)
		}
		// Legend, top left inside the frame.
		ly := marginT + 16 + 2*i*legendLine
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", marginL+10, ly, marginL+34, ly, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d">goshmem %s</text>`+"\n", marginL+40, ly+4, legendFontSize, html.EscapeString(s.label))
		ly += legendLine
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n", marginL+10, ly, marginL+34, ly, c)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d">limit: %s (%s)</text>`+"\n", marginL+40, ly+4, legendFontSize,
			html.EscapeString(s.points[0].LimitName), html.EscapeString(s.label))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// tickLabel writes a decade of metric m compactly: 10 ns, 1 µs, 100 GB/s.
func tickLabel(m Metric, v float64) string {
	s := ValueString(m, v)
	num, unit, _ := strings.Cut(s, " ")
	if strings.Contains(num, ".") {
		num = strings.TrimRight(strings.TrimRight(num, "0"), ".")
	}
	return num + " " + unit
}
