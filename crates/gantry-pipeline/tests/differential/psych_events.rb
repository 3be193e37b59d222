# libyaml's event stream as Ruby's Psych reports it (Psych is how GitLab parses YAML): the
# same listing as `gantry_pipeline::yaml::libyaml_events`, one line per event with its
# 1-based start line and column, then `ERR` and Psych's message when libyaml stops.
require "psych"
require "json"
class H < Psych::Handler
  attr_reader :out
  def initialize; @out = []; @at = nil; end
  def event_location(sl, sc, el, ec); @at = "#{sl + 1}:#{sc + 1}"; end
  def props(anchor, tag)
    s = +""
    s << " &#{anchor}" if anchor
    s << " <#{tag}>" if tag
    s
  end
  def start_stream(_e); @out << "#{@at} +STR"; end
  def end_stream; @out << "#{@at} -STR"; end
  def start_document(_v, _t, implicit); @out << "#{@at} +DOC#{implicit ? '' : ' ---'}"; end
  def end_document(implicit); @out << "#{@at} -DOC#{implicit ? '' : ' ...'}"; end
  def alias(a); @out << "#{@at} =ALI *#{a}"; end
  STYLES = { 1 => ":", 2 => "'", 3 => '"', 4 => "|", 5 => ">" }
  def scalar(value, anchor, tag, _plain, _quoted, style)
    @out << "#{@at} =VAL#{props(anchor, tag)} #{STYLES.fetch(style, ':')}#{esc(value)}"
  end
  ESCAPES = { "\t" => "\\t", "\r" => "\\r", "\n" => "\\n", "'" => "\\'", '"' => '\\"', "\\" => "\\\\" }
  def esc(v)
    v.gsub(/[\t\r\n'"\\]|[^\x20-\x7e]/) { |c| ESCAPES[c] || "\\u{#{c.ord.to_s(16)}}" }
  end
  def start_sequence(anchor, tag, _i, _s); @out << "#{@at} +SEQ#{props(anchor, tag)}"; end
  def end_sequence; @out << "#{@at} -SEQ"; end
  def start_mapping(anchor, tag, _i, _s); @out << "#{@at} +MAP#{props(anchor, tag)}"; end
  def end_mapping; @out << "#{@at} -MAP"; end
end
# What GitLab's loader builds of each document (`YAML.safe_load(config, permitted_classes:
# [Symbol], permitted_symbols: [], aliases: true)`, document by document), as one JSON line
# `VAL [doc, ...]`, or `VALERR Class: message`. Keys become strings (Gantry keeps a key's
# text), non-finite floats null, symbols `SYM:name` (Gantry has no symbols).
# GitLab stops a document whose tree (aliases expanded) is too big; so does this, before
# JSON would expand an alias bomb.
class TooBig < StandardError; end

def norm(v, budget = [1_000_000])
  budget[0] -= 1
  raise TooBig, "The parsed YAML is too big" if budget[0].negative?
  case v
  when Hash then v.each_with_object({}) { |(k, x), h| h[k.is_a?(Symbol) ? "SYM:#{k}" : k.to_s] = norm(x, budget) }
  when Array then v.map { |x| norm(x, budget) }
  when Float then v.finite? ? v : nil
  when Symbol then "SYM:#{v}"
  else v
  end
end

def load_line(text)
  loader = Psych::ClassLoader::Restricted.new(["Symbol"], [])
  scanner = Psych::ScalarScanner.new(loader)
  budget = [1_000_000]
  docs = Psych.parse_stream(text).children.map do |doc|
    norm(Psych::Visitors::ToRuby.new(scanner, loader).accept(doc), budget)
  end
  "VAL #{JSON.generate(docs)}"
rescue Exception => e
  "VALERR #{e.class}: #{e.message}".gsub("\n", " ")
end

# Every file named on standard input (one path a line), each as NUL `### <path>` and then its
# events, so one Ruby process reads the whole corpus.
$stdout.binmode
$stdin.each_line do |path|
  path = path.chomp
  h = H.new
  begin
    Psych::Parser.new(h).parse(File.read(path, encoding: "UTF-8"))
  rescue Psych::SyntaxError => e
    h.out << "ERR #{e.message}"
  end
  $stdout.write("\0### #{path}\n")
  $stdout.write(h.out.map { |l| l + "\n" }.join)
  $stdout.write(load_line(File.read(path, encoding: "UTF-8")) + "\n") unless h.out.last&.start_with?("ERR ")
end
