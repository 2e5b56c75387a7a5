#include "sim/scenario/csv_table.h"

#include <csv.h>

#include "sim/scenario/scenario.h"
#include "sim/scenario/yaml_file.h"

namespace rlsim::sim {

std::vector<std::vector<std::string>> read_csv_table(const std::string& path, const std::string& what) {
  const std::string text = read_input_file(path, what);
  struct State {
    std::vector<std::string> row;
    std::vector<std::vector<std::string>> rows;
  } st;
  csv_parser p;
  if (csv_init(&p, CSV_APPEND_NULL) != 0) throw ScenarioError(path + ": cannot initialise the CSV parser");
  auto on_field = [](void* s, std::size_t n, void* data) {
    static_cast<State*>(data)->row.emplace_back(static_cast<const char*>(s), n);
  };
  auto on_row = [](int, void* data) {
    auto* d = static_cast<State*>(data);
    d->rows.push_back(std::move(d->row));
    d->row.clear();
  };
  if (csv_parse(&p, text.data(), text.size(), on_field, on_row, &st) != text.size()) {
    const std::string err = csv_strerror(csv_error(&p));
    csv_free(&p);
    throw ScenarioError(path + ": CSV parse error: " + err);
  }
  csv_fini(&p, on_field, on_row, &st);
  csv_free(&p);
  if (st.rows.empty()) throw ScenarioError(path + ":1: empty CSV file (expected a header row)");
  return std::move(st.rows);
}

}  // namespace rlsim::sim
