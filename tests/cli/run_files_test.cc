#include "cli/run_files.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/cli/test_support.h"

namespace gossip::cli {
namespace {

using testing::TempDir;

const std::vector<std::string> kHeader = {"step",          "wall_seconds", "loss",
                                          "test_accuracy", "payload_sent", "payload_recv",
                                          "wire_sent",     "wire_recv"};

void append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << text;
}

TEST(TrainerCsvRow, ParsesByHeaderName) {
  auto row = parse_trainer_csv_row(kHeader, "240,18.2,0.45,0.812,100,200,300,400\r");
  ASSERT_TRUE(row.is_ok()) << row.status().message();
  EXPECT_EQ(row->step, 240);
  EXPECT_DOUBLE_EQ(row->wall_seconds, 18.2);
  EXPECT_DOUBLE_EQ(row->test_accuracy, 0.812);
  EXPECT_EQ(row->payload_sent, 100u);
  EXPECT_EQ(row->wire_sent, 300u);
  EXPECT_EQ(row->wire_recv, 400u);

  const std::vector<std::string> reordered = {"wire_sent", "step", "extra"};
  row = parse_trainer_csv_row(reordered, "7,3,whatever");
  ASSERT_TRUE(row.is_ok());
  EXPECT_EQ(row->step, 3);
  EXPECT_EQ(row->wire_sent, 7u);
  EXPECT_TRUE(std::isnan(row->test_accuracy));
}

TEST(TrainerCsvRow, EmptyAccuracyIsNan) {
  auto row = parse_trainer_csv_row(kHeader, "10,1.0,0.5,,1,2,3,4");
  ASSERT_TRUE(row.is_ok());
  EXPECT_TRUE(std::isnan(row->test_accuracy));
}

TEST(TrainerCsvRow, RejectsGarbage) {
  EXPECT_FALSE(parse_trainer_csv_row(kHeader, "step,wall_seconds,loss").is_ok());
  EXPECT_FALSE(parse_trainer_csv_row(kHeader, "10,1.0,abc,0.5,1,2,3,4").is_ok());
  EXPECT_FALSE(parse_trainer_csv_row(kHeader, "").is_ok());
}

TEST(TrainerCsvTail, FollowsAGrowingFile) {
  TempDir dir;
  const std::string csv = dir.file("node-0.csv");
  TrainerCsvTail tail(csv);
  EXPECT_FALSE(tail.latest());  // absent
  append(csv, "step,wall_seconds,loss,test_acc");
  EXPECT_FALSE(tail.latest());  // header still being written
  append(csv, "uracy,payload_sent,payload_recv,wire_sent,wire_recv\n");
  EXPECT_FALSE(tail.latest());  // header only
  append(csv, "10,1.0,0.9,0.5,1,1,2,2\n");
  ASSERT_TRUE(tail.latest());
  EXPECT_EQ(tail.latest()->step, 10);
  append(csv, "20,2.0,0.8,0.6,");
  EXPECT_EQ(tail.latest()->step, 10);  // a partial line is not read
  append(csv, "3,3,6,6\n");
  EXPECT_EQ(tail.latest()->step, 20);
  EXPECT_EQ(tail.latest()->wire_sent, 6u);
  for (int s = 30; s < 5000; s += 10) append(csv, std::to_string(s) + ",2.0,0.8,0.7,3,3,6,6\n");
  EXPECT_EQ(tail.latest()->step, 4990);
}

TEST(TrainerResult, ParsesAndNamesTheFileOnError) {
  TempDir dir;
  const std::string path = dir.file("node-2.json");
  auto missing = read_trainer_result(path);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find(path), std::string::npos);

  append(
      path,
      R"({"node":2,"steps":600,"accuracy_local":0.83,"accuracy_average":0.84,"loss":0.45,)"
      R"("payload_sent":10,"payload_recv":11,"wire_sent":12,"wire_recv":13,"wall_seconds":12.3})");
  auto r = read_trainer_result(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->node, 2);
  EXPECT_EQ(r->steps, 600);
  EXPECT_DOUBLE_EQ(r->accuracy_average, 0.84);
  EXPECT_EQ(r->wire_sent, 12u);
  EXPECT_DOUBLE_EQ(r->wall_seconds, 12.3);

  auto incomplete = parse_trainer_result(R"({"node":2,"steps":600})");
  ASSERT_FALSE(incomplete.is_ok());
  EXPECT_NE(incomplete.status().message().find("accuracy_local"), std::string::npos);
}

TEST(TrainerResult, RejectsBadResultLines) {
  const std::string good =
      R"({"node":1,"steps":600,"accuracy_local":0.83,"accuracy_average":0.84,"loss":0.45,)"
      R"("test_loss":null,"payload_sent":18446744073709551615,"payload_recv":11,"wire_sent":12,)"
      R"("wire_recv":13,"wall_seconds":12.3,"extra":{"nested":[1,2]}})";
  auto r = parse_trainer_result(good);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->payload_sent, 18446744073709551615ull);  // exact
  EXPECT_EQ(r->node, 1);

  // Truncated, garbage, or not an object.
  for (const std::string& bad : {good.substr(0, good.size() / 2), std::string("not json"),
                                 std::string(""), std::string("[1]")}) {
    EXPECT_FALSE(parse_trainer_result(bad).is_ok()) << bad;
  }

  // A field of the wrong kind, null (a diverged run), negative or fractional: the key is named.
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {replace(R"("loss":0.45)", R"("loss":null)"), "loss"},
           {replace(R"("accuracy_local":0.83)", R"("accuracy_local":"0.83")"), "accuracy_local"},
           {replace(R"("steps":600)", R"("steps":-600)"), "steps"},
           {replace(R"("wire_sent":12)", R"("wire_sent":12.5)"), "wire_sent"},
           {replace(R"("payload_recv":11)", R"("payload_recv":true)"), "payload_recv"},
           {replace(R"("wire_recv":13,)", ""), "wire_recv"}}) {
    auto bad = parse_trainer_result(text);
    ASSERT_FALSE(bad.is_ok()) << text;
    EXPECT_NE(bad.status().message().find(key), std::string::npos) << bad.status().message();
  }
}

TEST(ReadLastLines, ReturnsTheTail) {
  TempDir dir;
  const std::string log = dir.file("log");
  EXPECT_TRUE(read_last_lines(log, 5).empty());
  append(log, "one\ntwo\r\nthree\nfour\nfive\nsix\n\n");
  EXPECT_EQ(read_last_lines(log, 5),
            (std::vector<std::string>{"two", "three", "four", "five",
                                      "six"}));  // trailing blank lines dropped
  EXPECT_EQ(read_last_lines(log, 10).front(), "one");
  EXPECT_EQ(read_last_lines(log, 10)[1], "two");
  const std::string partial = dir.file("partial");
  append(partial, "a\nno newline at end");
  EXPECT_EQ(read_last_lines(partial, 1), (std::vector<std::string>{"no newline at end"}));
}

}  // namespace
}  // namespace gossip::cli
