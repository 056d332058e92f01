#include "cli/report_page.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/config_text.h"
#include "cli/html.h"
#include "cli/svg_plot.h"

namespace mlatune::cli {
namespace {

// Written so that the page is also well-formed XML (every element closed, no
// named entities but the XML ones), which lets a strict parser check it.
constexpr const char* style = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 72em; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; } h3 { margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, td.config { font-family: ui-monospace, monospace; font-size: 11px; word-break: break-all; }
.plots { display: flex; flex-wrap: wrap; gap: 8px; }
svg.plot { background: #fff; border: 1px solid #eee; font-family: system-ui, sans-serif; }
svg .title { font-size: 12px; font-weight: 600; } svg .tick, svg .label, svg .note { font-size: 10px; fill: #444; }
svg .axis { font-size: 10px; fill: #666; } svg .grid { stroke: #eee; }
svg circle { fill: #0072b2; fill-opacity: 0.45; } svg circle.mid { fill: #d55e00; fill-opacity: 1; }
svg .box { fill: #e8f0f8; stroke: #0072b2; } svg .median { stroke: #d55e00; stroke-width: 2; }
svg .whisker, svg .range { stroke: #555; stroke-width: 1.5; } svg .step { fill: none; stroke-width: 1.8; }
p.note { color: #555; font-size: 12px; }
)css";

bool ok_timed(const MeasurementRecord& r) {
  return r.measurement.outcome == Outcome::ok && r.measurement.timing.has_value();
}

/// One shape of one kernel on one device, with its measurements in order.
struct ShapeGroup {
  std::string shape;
  std::vector<const MeasurementRecord*> rows;
};

/// One kernel on one device: its shapes in the order first measured.
struct Section {
  std::string kernel;
  std::string device;
  std::vector<ShapeGroup> shapes;
};

std::string device_text(const DeviceIdentity& d) { return fmt::format("{} ({})", d.name, d.arch); }

std::vector<Section> sections_of(const std::vector<MeasurementRecord>& measurements) {
  std::vector<Section> sections;
  std::map<std::pair<std::string, std::string>, std::size_t> section_index;
  std::map<std::tuple<std::size_t, std::string>, std::size_t> shape_index;
  for (const MeasurementRecord& r : measurements) {
    const auto key = std::pair{r.kernel.name, device_text(r.device)};
    auto [s, new_section] = section_index.try_emplace(key, sections.size());
    if (new_section) sections.push_back({key.first, key.second, {}});
    Section& section = sections[s->second];
    auto [g, new_shape] = shape_index.try_emplace({s->second, r.measurement.shape}, section.shapes.size());
    if (new_shape) section.shapes.push_back({r.measurement.shape, {}});
    section.shapes[g->second].rows.push_back(&r);
  }
  return sections;
}

std::optional<double> as_number(const std::string& text) {
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// The parameters and values of a shape's configs: the space's order where
/// it has one, else numeric order when every value is a number, else text.
ParameterOrder parameters_of(const ShapeGroup& group, const std::optional<ParameterOrder>& space) {
  std::vector<std::string> names;
  std::map<std::string, std::set<std::string>> seen;
  for (const MeasurementRecord* r : group.rows)
    for (auto& [name, value] : config_pairs(r->measurement.config)) {
      if (!seen.count(name)) names.push_back(name);
      seen[name].insert(value);
    }
  ParameterOrder order;
  for (const std::string& name : names) {
    std::vector<std::string> values;
    if (space) {
      for (const auto& [space_name, space_values] : *space)
        if (space_name == name)
          for (const std::string& v : space_values)
            if (seen[name].count(v)) values.push_back(v);
    }
    std::vector<std::string> rest;
    for (const std::string& v : seen[name])
      if (std::find(values.begin(), values.end(), v) == values.end()) rest.push_back(v);
    if (std::all_of(rest.begin(), rest.end(), [](const std::string& v) { return as_number(v).has_value(); }))
      std::sort(rest.begin(), rest.end(), [](const std::string& a, const std::string& b) {
        return *as_number(a) < *as_number(b);
      });
    values.insert(values.end(), rest.begin(), rest.end());
    order.emplace_back(name, std::move(values));
  }
  return order;
}

// ---- tables ------------------------------------------------------------------------

std::string cell(const std::string& text, const char* cls = nullptr) {
  return cls ? fmt::format("<td class=\"{}\">{}</td>", cls, escape_html(text))
             : fmt::format("<td>{}</td>", escape_html(text));
}

std::string header_row(std::initializer_list<const char*> names) {
  std::string out = "<tr>";
  for (const char* name : names) out += fmt::format("<th>{}</th>", escape_html(name));
  return out + "</tr>";
}

std::string best_table(const ReportInput& input) {
  std::map<std::int64_t, const MeasurementRecord*> by_id;
  for (const MeasurementRecord& r : input.measurements) by_id[r.id] = &r;
  std::string out = "<h2>Best configs</h2>";
  if (input.best.empty()) return out + "<p>No best entries (no config ran correctly yet).</p>";
  out += "<table>" + header_row({"kernel", "device", "toolchain", "shape", "best config", "median (µs)", "min (µs)",
                                 "p90 (µs)", "launches", "measured at"});
  for (const BestRecord& b : input.best) {
    const auto found = by_id.find(b.entry.measurement_id);
    const MeasurementRecord* m = found == by_id.end() ? nullptr : found->second;
    const std::optional<Timing> t = m ? m->measurement.timing : std::nullopt;
    out += "<tr>" + cell(b.kernel.name) + cell(device_text(b.device)) +
           cell(fmt::format("NVRTC {}, mlatune {}", b.toolchain.nvrtc_version, b.toolchain.mlatune_version)) +
           cell(b.entry.shape) + cell(b.entry.config, "config") + cell(format_us(b.entry.median_us), "num") +
           cell(t ? format_us(t->min_us) : "-", "num") + cell(t ? format_us(t->p90_us) : "-", "num") +
           cell(t ? std::to_string(t->samples) : "-", "num") + cell(m ? m->measured_at : "-") + "</tr>";
  }
  return out + "</table>";
}

/// "random, seed 7, shard 1/4" from a run's recorded settings.
std::string run_settings(const RunRecord& run) {
  std::string text = run.strategy;
  const nlohmann::json settings = nlohmann::json::parse(run.strategy_settings, nullptr, false);
  if (!settings.is_object()) return text;
  for (const char* key : {"max_evals", "seed", "shard", "replay", "cache"}) {
    const auto at = settings.find(key);
    if (at == settings.end() || at->is_null()) continue;
    text += fmt::format(", {} {}", key, at->is_string() ? at->get<std::string>() : at->dump());
  }
  return text;
}

std::string runs_table(const ReportInput& input) {
  std::string out = "<h2>Runs</h2><table>" +
                    header_row({"run", "kernel", "settings", "space file", "started", "finished", "status"});
  for (const RunRecord& r : input.runs)
    out += "<tr>" + cell(std::to_string(r.id), "num") + cell(r.kernel_name) + cell(run_settings(r)) +
           cell(r.space_path, "config") + cell(r.started_at) + cell(r.finished_at) + cell(r.status) + "</tr>";
  return out + "</table>";
}

// ---- one shape -----------------------------------------------------------------------

std::string outcome_line(const ShapeGroup& group) {
  std::map<std::string, int> counts;
  std::set<std::string> configs;
  for (const MeasurementRecord* r : group.rows) {
    ++counts[std::string(to_string(r->measurement.outcome))];
    configs.insert(r->measurement.config);
  }
  std::string text = fmt::format("{} measurements of {} configs:", group.rows.size(), configs.size());
  for (const auto& [outcome, count] : counts) text += fmt::format(" {} {};", outcome, count);
  text.pop_back();
  return "<p>" + escape_html(text) + "</p>";
}

std::string parameter_plots(const ShapeGroup& group, const std::optional<ParameterOrder>& space) {
  std::string out = "<h4>Time per parameter value</h4><p class=\"note\">Every correct config's median time, by the "
                    "value of one parameter; the box spans the quartiles, the red line is the median, the "
                    "whisker runs from the fastest to the slowest.</p><div class=\"plots\">";
  for (const auto& [name, values] : parameters_of(group, space)) {
    std::vector<StripCategory> categories;
    for (const std::string& v : values) categories.push_back({v, {}});
    for (const MeasurementRecord* r : group.rows) {
      if (!ok_timed(*r)) continue;
      for (const auto& [n, v] : config_pairs(r->measurement.config)) {
        if (n != name) continue;
        const auto at = std::find(values.begin(), values.end(), v) - values.begin();
        categories[static_cast<std::size_t>(at)].times_us.push_back(r->measurement.timing->median_us);
      }
    }
    out += strip_plot(name, categories);
  }
  return out + "</div>";
}

std::string spread_section(const ShapeGroup& group) {
  std::vector<const MeasurementRecord*> ok;
  for (const MeasurementRecord* r : group.rows)
    if (ok_timed(*r)) ok.push_back(r);
  std::stable_sort(ok.begin(), ok.end(), [](const MeasurementRecord* a, const MeasurementRecord* b) {
    return a->measurement.timing->median_us < b->measurement.timing->median_us;
  });
  if (ok.size() > report_spread_rows) ok.resize(report_spread_rows);
  std::string out = fmt::format(
      "<h4>Spread of repeated timings (fastest {})</h4><p class=\"note\">Each measurement keeps the fastest, "
      "median and 90th-percentile time of its timed launches (not every launch): the line runs from the "
      "fastest to the 90th percentile, the dot is the median.</p>",
      ok.size());
  if (ok.empty()) return out + "<p>No config ran correctly.</p>";
  std::vector<RangeRow> rows;
  std::string table = "<table>" + header_row({"#", "config", "min (µs)", "median (µs)", "p90 (µs)", "launches",
                                              "spread", "timing method"});
  for (std::size_t i = 0; i < ok.size(); ++i) {
    const Measurement& m = ok[i]->measurement;
    const Timing& t = *m.timing;
    rows.push_back({fmt::format("#{}", i + 1), m.config, std::min(t.min_us, t.median_us), t.median_us,
                    std::max(t.p90_us, t.median_us)});
    table += "<tr>" + cell(std::to_string(i + 1), "num") + cell(m.config, "config") + cell(format_us(t.min_us), "num") +
             cell(format_us(t.median_us), "num") + cell(format_us(t.p90_us), "num") +
             cell(std::to_string(t.samples), "num") + cell(fmt::format("{:.3f}", t.spread), "num") + cell(t.method) +
             "</tr>";
  }
  return out + range_plot(group.shape + ": fastest measurements", rows) + table + "</table>";
}

/// The best time so far after each evaluation, one series per run.
std::string progress_section(const ShapeGroup& group, const std::map<std::string, const RunRecord*>& runs) {
  constexpr std::size_t most_series = 8;
  std::vector<std::string> order;  // run uuids, first measured first
  std::map<std::string, StepSeries> series;
  for (const MeasurementRecord* r : group.rows) {
    auto [at, added] = series.try_emplace(r->run_uuid);
    if (added) {
      order.push_back(r->run_uuid);
      const auto run = runs.find(r->run_uuid);
      at->second.label = run == runs.end() ? r->run_uuid.substr(0, 8)
                                           : fmt::format("run {} ({})", run->second->id, run->second->strategy);
    }
    std::vector<double>& v = at->second.values_us;
    double best = v.empty() ? std::numeric_limits<double>::quiet_NaN() : v.back();
    if (ok_timed(*r) && (std::isnan(best) || r->measurement.timing->median_us < best))
      best = r->measurement.timing->median_us;
    v.push_back(best);
  }
  std::vector<StepSeries> shown;
  for (std::size_t i = 0; i < std::min(order.size(), most_series); ++i) shown.push_back(series[order[i]]);
  std::string out = "<h4>Search progress</h4><p class=\"note\">The fastest correct time found after each "
                    "evaluation, per run, in the order the run measured.";
  if (order.size() > most_series)
    out += fmt::format(" The first {} of {} runs are shown.", most_series, order.size());
  return out + "</p>" + step_plot(group.shape + ": best so far", "evaluations", shown);
}

std::string shape_section(const ShapeGroup& group, const ReportInput& input,
                          const std::map<std::string, const RunRecord*>& runs) {
  return "<h3>" + escape_html(group.shape) + "</h3>" + outcome_line(group) +
         parameter_plots(group, input.parameters) + spread_section(group) + progress_section(group, runs);
}

std::string page_header(const ReportInput& input) {
  const StoreInfo& i = input.info;
  std::string out = "<h1>mlatune report</h1><p>Database <code>" + escape_html(input.database.string()) + "</code>";
  out += escape_html(fmt::format(": {} runs, {} measurements, {} best entries, {} kernels, {} devices.", i.runs,
                                 i.measurements, i.best, i.kernels, i.devices));
  if (!input.scope.empty()) out += " " + escape_html(input.scope);
  return out + "</p>";
}

}  // namespace

std::string report_html(const ReportInput& input) {
  std::map<std::string, const RunRecord*> runs;
  for (const RunRecord& r : input.runs) runs[r.uuid] = &r;
  std::string body = page_header(input) + best_table(input) + runs_table(input);
  for (const Section& section : sections_of(input.measurements)) {
    body += "<h2>" + escape_html(section.kernel + " on " + section.device) + "</h2>";
    for (const ShapeGroup& group : section.shapes) body += shape_section(group, input, runs);
  }
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>" +
         escape_html("mlatune report: " + input.database.filename().string()) + "</title><style>" + style +
         "</style></head><body>" + body + "</body></html>\n";
}

}  // namespace mlatune::cli
