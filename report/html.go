package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/relayout/relayout/manifests"
)

// Chart colours: the test finds the bars in a screenshot by them.
const (
	ColorBefore = "#b0b8c4" // read bytes before the re-layout
	ColorAfter  = "#1f6feb" // read bytes after
)

// htmlBar is one row of the read-bytes chart.
type htmlBar struct {
	Label                   string
	Rows                    int64
	Before, After           int64
	BeforeW, AfterW, Y, TxY float64
	Reduction               string
	Tail                    bool
}

type htmlPage struct {
	R                       *Report
	Title                   string
	Bars                    []htmlBar
	ChartH, LabelW, BarW    float64
	ColorBefore, ColorAfter string
	Rows                    [][3]string
	Totals                  [][2]string
	Packing, Transfer       [][2]string
	Stages                  [][2]string
	Reduction               string
}

// chartSlices is how many of the largest slices the chart draws; the rest
// are one "tail" bar.
const chartSlices = 20

// HTML writes the report as one self-contained page (inline CSS and SVG,
// no scripts, no fetches): per-slice read bytes before and after as a bar
// chart (the largest slices and the tail), sizes, packing, transfer per
// epoch, memory and time, warnings. Every figure is the JSON's, each in an
// element whose id names its field, so a test can read them back.
func (r *Report) HTML(w io.Writer) error {
	p := htmlPage{R: r, ColorBefore: ColorBefore, ColorAfter: ColorAfter, LabelW: 260, BarW: 560}
	what := "run"
	if r.Estimate {
		what = "dry run (estimate)"
	}
	p.Title = fmt.Sprintf("relayout %s report", what)
	// The chart: the listed slices, largest first, then the tail.
	list := r.Slices.List
	if len(list) > chartSlices {
		list = list[:chartSlices]
	}
	var lb, la, lr int64
	for _, s := range list {
		p.Bars = append(p.Bars, htmlBar{Label: keyLabel(s.Key), Rows: s.Rows, Before: s.ReadBytesBefore, After: s.ReadBytesAfter})
		lb, la, lr = lb+s.ReadBytesBefore, la+s.ReadBytesAfter, lr+s.Rows
	}
	t := r.Slices.Totals
	if rest := r.Slices.Count - len(list); rest > 0 {
		// The tail as its mean slice, comparable with the bars above.
		n := int64(rest)
		p.Bars = append(p.Bars, htmlBar{Label: fmt.Sprintf("the other %d slices (mean)", rest), Rows: (t.Rows - lr) / n,
			Before: max(t.ReadBytesBefore-lb, 0) / n, After: max(t.ReadBytesAfter-la, 0) / n, Tail: true})
	}
	var top int64 = 1
	for _, b := range p.Bars {
		top = max(top, b.Before, b.After)
	}
	for i := range p.Bars {
		b := &p.Bars[i]
		b.Y = float64(i)*34 + 8
		b.TxY = b.Y + 12
		b.BeforeW = p.BarW * float64(b.Before) / float64(top)
		b.AfterW = p.BarW * float64(b.After) / float64(top)
		if b.After > 0 {
			b.Reduction = fmt.Sprintf("%.1fx", float64(b.Before)/float64(b.After))
		}
	}
	p.ChartH = float64(len(p.Bars))*34 + 16
	p.Reduction = fmt.Sprintf("%.2fx", t.ReadReduction)
	in, out := r.Input, r.Output
	p.Rows = [][3]string{
		{"input-files", fmt.Sprint(in.Files)}, {"input-bytes", fmt.Sprint(in.Bytes), HumanBytes(in.Bytes)}, {"input-rows", fmt.Sprint(in.Rows)},
		{"input-row-groups", fmt.Sprint(in.RowGroups)},
		{"output-files", fmt.Sprint(out.ParquetFiles)}, {"output-bytes", fmt.Sprint(out.ParquetBytes), HumanBytes(out.ParquetBytes)}, {"output-rows", fmt.Sprint(out.Rows)},
		{"output-row-groups", fmt.Sprint(out.RowGroups)}, {"output-shards", fmt.Sprint(out.Shards)},
		{"output-tensor-bytes", fmt.Sprint(out.TensorBytes), HumanBytes(out.TensorBytes)},
	}
	p.Totals = [][2]string{
		{"slices-count", fmt.Sprint(r.Slices.Count)}, {"read-bytes-before", fmt.Sprint(t.ReadBytesBefore)},
		{"read-bytes-after", fmt.Sprint(t.ReadBytesAfter)}, {"row-groups-before", fmt.Sprint(t.RowGroupsBefore)},
		{"row-groups-after", fmt.Sprint(t.RowGroupsAfter)},
	}
	if pk := r.Packing; pk != nil {
		p.Packing = [][2]string{{"packing-rows", fmt.Sprint(pk.Rows)}, {"packing-queries", fmt.Sprint(pk.Queries)},
			{"packing-bytes-before", fmt.Sprint(pk.BytesBefore)}, {"packing-bytes-after", fmt.Sprint(pk.BytesAfter)},
			{"packing-items-p50", fmt.Sprint(pk.ItemsPerQuery.P50)}, {"packing-items-max", fmt.Sprint(pk.ItemsPerQuery.Max)}}
	}
	if tr := r.Transfer; tr != nil {
		p.Transfer = [][2]string{{"transfer-unpacked-bytes", fmt.Sprint(tr.UnpackedBytes)}, {"transfer-packed-bytes", fmt.Sprint(tr.PackedBytes)},
			{"transfer-ratio", fmt.Sprintf("%.2f", tr.Ratio)}}
	}
	for _, s := range r.Stages {
		p.Stages = append(p.Stages, [2]string{s.Name, fmt.Sprintf("%.2f", s.Seconds)})
	}
	return pageTmpl.Execute(w, p)
}

func keyLabel(k manifests.KeyValues) string {
	parts := make([]string, len(k))
	for i, kv := range k {
		parts[i] = fmt.Sprintf("%s=%v", kv.Name, kv.Value)
	}
	s := []rune(strings.Join(parts, ", "))
	if len(s) > 40 { // cut between runes, not inside one
		s = append(s[:39], '…')
	}
	return string(s)
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"human": HumanBytes, "addf": func(a, b, c float64) float64 { return a + b + c },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.4 "DejaVu Sans",Arial,sans-serif;margin:24px;color:#1b1f24;max-width:1000px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.meta{color:#57606a} table{border-collapse:collapse} td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #eaeef2}
th{text-align:left;font-weight:normal;color:#57606a} .big{font-size:28px;font-weight:bold}
.warn{background:#fff8c5;border:1px solid #d4a72c;padding:6px 10px;margin:4px 0}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="meta">relayout {{.R.RelayoutVersion}} · {{.R.Command}} · config <span id="config-hash">{{.R.ConfigHash}}</span> · {{.R.StartedAt}} · {{.R.Host.CPUs}} CPUs</div>
<h2>Reading each slice once (SELECT * WHERE slice, row groups pruned by statistics)</h2>
<div><span class="big" id="read-reduction">{{.Reduction}}</span> less read over all {{.R.Slices.Count}} slices:
{{human .R.Slices.Totals.ReadBytesBefore}} before, {{human .R.Slices.Totals.ReadBytesAfter}} after</div>
<div class="legend"><span style="background:{{.ColorBefore}}"></span>before (input) <span style="background:{{.ColorAfter}}"></span>after (output)</div>
<svg id="chart" xmlns="http://www.w3.org/2000/svg" width="{{printf "%.0f" (addf .LabelW .BarW 220)}}" height="{{printf "%.0f" .ChartH}}" role="img" aria-label="read bytes per slice before and after">
{{range .Bars}}<g class="bar" data-tail="{{.Tail}}" data-before="{{.Before}}" data-after="{{.After}}" data-rows="{{.Rows}}">
<text x="0" y="{{printf "%.1f" .TxY}}" font-size="12">{{.Label}}</text>
<rect x="{{printf "%.0f" $.LabelW}}" y="{{printf "%.1f" .Y}}" width="{{printf "%.2f" .BeforeW}}" height="12" fill="{{$.ColorBefore}}"/>
<rect x="{{printf "%.0f" $.LabelW}}" y="{{printf "%.1f" (addf .Y 13 0)}}" width="{{printf "%.2f" .AfterW}}" height="12" fill="{{$.ColorAfter}}"/>
<text x="{{printf "%.0f" (addf $.LabelW .BeforeW 6)}}" y="{{printf "%.1f" .TxY}}" font-size="11" fill="#57606a">{{human .Before}} → {{human .After}} {{.Reduction}}</text>
</g>
{{end}}</svg>
<h2>Sizes</h2>
<table>{{range .Rows}}<tr><th>{{index . 0}}</th><td id="{{index . 0}}">{{index . 1}}</td><td class="meta">{{index . 2}}</td></tr>{{end}}</table>
<h2>Slices</h2>
<table>{{range .Totals}}<tr><th>{{index . 0}}</th><td id="{{index . 0}}">{{index . 1}}</td></tr>{{end}}</table>
{{if .Packing}}<h2>Packing</h2>
<table>{{range .Packing}}<tr><th>{{index . 0}}</th><td id="{{index . 0}}">{{index . 1}}</td></tr>{{end}}</table>{{end}}
{{if .Transfer}}<h2>Transfer per epoch (tensor bytes a loader moves)</h2>
<table>{{range .Transfer}}<tr><th>{{index . 0}}</th><td id="{{index . 0}}">{{index . 1}}</td></tr>{{end}}</table>{{end}}
<h2>Memory and time</h2>
<table><tr><th>memory-bytes</th><td id="memory-bytes">{{.R.Resources.MemoryBytes}}</td></tr>
<tr><th>temp-disk-bytes</th><td id="temp-disk-bytes">{{.R.Resources.TempDiskBytes}}</td></tr>
<tr><th>seconds</th><td id="seconds">{{printf "%.2f" .R.Resources.Seconds}}</td></tr>
<tr><th>peak-rss-bytes</th><td id="peak-rss-bytes">{{.R.PeakRSSBytes}}</td></tr>
{{range .Stages}}<tr><th>stage {{index . 0}}</th><td>{{index . 1}} s</td></tr>{{end}}</table>
<h2>Warnings</h2>
{{range .R.Warnings}}<div class="warn" data-code="{{.Code}}"><b>{{.Code}}</b>: {{.Message}}</div>{{else}}<div id="no-warnings">none</div>{{end}}
</body></html>
`))

// HumanBytes prints a byte count in binary units (1.5 MiB).
func HumanBytes(n int64) string {
	const u = 1024
	if n < u {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(u), 0
	for m := n / u; m >= u; m /= u {
		div *= u
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
