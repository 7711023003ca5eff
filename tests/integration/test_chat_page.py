"""The built-in chat page (GET /, server/http/ui/chat.html embedded by server/http/ui.c).

Over plain HTTP: its headers and Content-Security-Policy (the hashes of the page's own
style and script), that it never needs an API key, and that --no-ui makes / a 404 like
any unknown URL. In headless Chromium (Debian's chromium and chromium-driver, the
selenium package; tools/setup.sh installs them): a system prompt and a message give a
streamed answer equal to the API's own, with the token rate shown; Stop ends a long
answer and the server stops generating it; a 400 shows its message; with --api-key the
page shows the 401 until the key is entered; while the model loads the page is served and
says so; on a narrow screen the settings fold away.
Screenshots go to build/test-artifacts/ (their paths are printed)."""
import base64
import hashlib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import threading
import time

import pytest

from spindle_server import Server

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "server" / "http" / "ui" / "chat.html"
ARTIFACTS = ROOT / "build" / "test-artifacts"
SYSTEM = "You are a helpful assistant who answers in one short sentence."
QUESTION = "What is the capital of France?"


def inline_hash(tag):
    """The CSP source of the page's one <tag> element, as a browser hashes it."""
    text = PAGE.read_text(encoding="utf-8")
    body = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.S).group(1)
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"


# ---- over HTTP ----


@pytest.fixture(scope="module")
def keyed_server(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--api-key", "sk-page")
    yield server
    assert server.stop() == 0


def test_page_is_served_with_its_headers(keyed_server):
    status, headers, body = keyed_server.request("GET", "/")  # no key: the page needs none
    assert status == 200, body
    assert body == PAGE.read_text(encoding="utf-8")
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Cache-Control"] == "no-cache"
    assert headers["X-Content-Type-Options"] == "nosniff"
    csp = dict(d.strip().split(" ", 1) for d in headers["Content-Security-Policy"].split(";"))
    assert csp["default-src"] == "'none'"
    assert csp["script-src"] == inline_hash("script")
    assert csp["style-src"] == inline_hash("style")
    assert csp["connect-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'"
    status, headers, _ = keyed_server.request("HEAD", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    status, headers, body = keyed_server.request("POST", "/", body={})
    assert status == 405 and headers["Allow"] == "GET, HEAD", body
    # the API behind it still needs the key
    status, _, body = keyed_server.request("GET", "/v1/models")
    assert status == 401, body


def test_no_ui_makes_root_unknown_and_never_keyed(spindle_bin, stories_model):
    server = Server(spindle_bin, stories_model, "--no-ui", "--api-key", "sk-page")
    try:
        status, _, body = server.request("GET", "/")
        assert status == 404, body  # not 401: / never needs a key
        assert body["error"]["message"] == "Invalid URL (GET /)"
        status, _, other = server.request("GET", "/nowhere")
        assert status == 404 and other["error"]["type"] == body["error"]["type"]
        status, _, _ = server.request("GET", "/v1/models", headers={"Authorization": "Bearer sk-page"})
        assert status == 200
    finally:
        assert server.stop() == 0


# ---- in headless Chromium ----


def browser_missing():
    """What the browser tests lack, as one line; empty when nothing."""
    missing = [name for name, found in (("chromium", shutil.which("chromium")),
                                        ("chromium-driver", shutil.which("chromedriver")),
                                        ("selenium (pip)", importlib.util.find_spec("selenium"))) if not found]
    return ", ".join(missing)


@pytest.fixture(scope="module")
def browser():
    missing = browser_missing()
    if missing:
        pytest.skip(f"chat page browser test needs {missing} (tools/setup.sh installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # the Debian driver, never one selenium would fetch
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def wait_for(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def text(driver, element_id):
    return driver.find_element("id", element_id).text


def open_page(driver, server, width=1200, height=900):
    driver.set_window_size(width, height)
    driver.get(server.url + "/")
    driver.get_log("browser")  # start the console log afresh
    # the page's script fetches are recorded, to check what it sends
    driver.execute_script("""
        window.__sent = [];
        const fetch0 = window.fetch;
        window.fetch = (url, opts) => { window.__sent.push({url, opts}); return fetch0(url, opts); };""")


def set_field(driver, element_id, value):
    field = driver.find_element("id", element_id)
    field.clear()
    field.send_keys(str(value))


def send_message(driver, message):
    set_field(driver, "input", message)
    driver.find_element("id", "send").click()


def last_answer(driver):
    answers = driver.find_elements("css selector", ".msg.assistant")
    return answers[-1] if answers else None


def answer_state(driver):
    answer = last_answer(driver)
    return answer.get_attribute("data-state") if answer else None


def sent_chat_bodies(driver):
    sent = driver.execute_script("return window.__sent")
    return [json.loads(s["opts"]["body"]) for s in sent if s["url"] == "/v1/chat/completions"]


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    print(f"chat page screenshot: {path}")
    return path


def severe_console_messages(driver):
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_page_streams_an_answer_with_its_rate(browser, smol_server):
    open_page(browser, smol_server)
    model_id = smol_server.client().models.list().data[0].id
    wait_for(lambda: model_id in text(browser, "model"), 30, "the model id from /v1/models")
    set_field(browser, "system", SYSTEM)
    set_field(browser, "temperature", 0)
    set_field(browser, "max_tokens", 48)
    send_message(browser, QUESTION)
    wait_for(lambda: answer_state(browser) == "done", 60, "the streamed answer to complete")

    (body,) = sent_chat_bodies(browser)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["model"] == model_id and body["max_tokens"] == 48 and body["temperature"] == 0
    assert body["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    # the streamed text is the API's own greedy answer to the same request
    expected = smol_server.client().chat.completions.create(model=model_id, messages=body["messages"],
                                                            max_tokens=48, temperature=0)
    shown = last_answer(browser).find_element("css selector", ".content").get_attribute("textContent")
    assert shown and shown == expected.choices[0].message.content
    rate = re.fullmatch(r"(\d+) tokens, ([\d.]+) tokens/s", text(browser, "rate"))
    assert rate, text(browser, "rate")
    assert int(rate[1]) == expected.usage.completion_tokens and float(rate[2]) > 0
    assert text(browser, "error") == ""
    assert browser.find_element("id", "send").is_enabled() and not browser.find_element("id", "stop").is_enabled()
    # nothing refused by the Content-Security-Policy, no failed load
    assert severe_console_messages(browser) == []
    screenshot(browser, "chat_page.png")

    # the conversation goes on: the second request carries the first answer
    set_field(browser, "max_tokens", 8)
    send_message(browser, "And of Italy?")
    wait_for(lambda: len(browser.find_elements("css selector", ".msg.assistant[data-state='done']")) == 2, 60,
             "the second answer")
    second = sent_chat_bodies(browser)[-1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == shown


def test_stop_ends_a_long_answer(browser, smol_server):
    open_page(browser, smol_server)
    wait_for(lambda: "SmolLM2" in text(browser, "model"), 30, "the model id")
    set_field(browser, "max_tokens", 6000)
    send_message(browser, "Write a very long story about a dragon and a lighthouse keeper.")
    # it streams: text shows while the answer is still coming
    wait_for(lambda: answer_state(browser) == "streaming" and len(last_answer(browser).text) > 40, 60,
             "streamed text while the answer runs")
    smol_server.wait_metric("spindle_requests_running", lambda v: v == 1)
    browser.find_element("id", "stop").click()
    wait_for(lambda: answer_state(browser) == "stopped", 10, "the answer to stop")
    stopped_text = last_answer(browser).find_element("css selector", ".content").get_attribute("textContent")
    time.sleep(1.0)
    assert last_answer(browser).find_element("css selector", ".content").get_attribute("textContent") == stopped_text
    assert "(stopped)" in last_answer(browser).text
    assert re.fullmatch(r"\d+ tokens, [\d.]+ tokens/s", text(browser, "rate")), text(browser, "rate")
    assert browser.find_element("id", "send").is_enabled()
    # the server saw the client go and stopped generating it
    smol_server.wait_metric("spindle_requests_running", lambda v: v == 0)


def test_bad_request_shows_the_servers_message(browser, smol_server):
    open_page(browser, smol_server)
    wait_for(lambda: "SmolLM2" in text(browser, "model"), 30, "the model id")
    set_field(browser, "max_tokens", 100000)
    send_message(browser, "Hello")
    error = wait_for(lambda: text(browser, "error"), 30, "the error")
    assert error.startswith("400: ") and "maximum context length is 8192 tokens" in error, error
    # nothing was answered: the message is back in the input, not in the conversation
    assert browser.find_elements("css selector", ".msg") == []
    assert browser.find_element("id", "input").get_attribute("value") == "Hello"


def test_api_key_is_asked_for_and_kept(browser, keyed_server):
    open_page(browser, keyed_server)
    error = wait_for(lambda: text(browser, "error"), 30, "the 401 from /v1/models")
    assert error.startswith("401: ") and "API key" in error, error
    send_message(browser, "Once upon a time")
    wait_for(lambda: browser.find_element("id", "input").get_attribute("value") == "Once upon a time", 30,
             "the refused message back in the input")
    assert text(browser, "error").startswith("401: ")
    assert browser.find_elements("css selector", ".msg") == []

    set_field(browser, "api_key", "sk-page")
    browser.find_element("id", "system").click()  # leaving the field saves the key
    wait_for(lambda: "stories260K" in text(browser, "model"), 30, "the model id once the key is set")
    assert text(browser, "error") == ""
    browser.find_element("id", "send").click()
    wait_for(lambda: answer_state(browser) == "done", 60, "the answer with the key")
    assert sent_chat_bodies(browser)[-1]["messages"][-1]["content"] == "Once upon a time"
    assert all(s["opts"]["headers"]["Authorization"] == "Bearer sk-page"
               for s in browser.execute_script("return window.__sent")[1:])
    # kept in this browser: a reload finds it
    browser.refresh()
    wait_for(lambda: "stories260K" in text(browser, "model"), 30, "the model id after a reload")
    assert browser.find_element("id", "api_key").get_attribute("value") == "sk-page"
    browser.execute_script("localStorage.clear()")


def test_page_is_served_while_the_model_loads(browser, spindle_bin, tmp_path):
    # open() of a FIFO blocks until a writer comes: the server listens and stays loading
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    server = Server(spindle_bin, str(fifo), wait_ready=False)
    try:
        status = wait_for(lambda: request_or_none(server, "/"), 30, "the page while loading")
        assert status == 200
        open_page(browser, server)
        assert wait_for(lambda: text(browser, "error"), 30, "the 503") == "503: Loading model"
        # a writer unblocks the load, which then fails (a FIFO is no model file)
        writer = threading.Thread(target=lambda: open(fifo, "wb").close())
        writer.start()
        assert server.proc.wait(30) == 2
        writer.join()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def request_or_none(server, path):
    try:
        return server.request("GET", path, timeout=2)[0]
    except OSError:
        return None


def test_narrow_screen_folds_the_settings(browser, keyed_server):
    open_page(browser, keyed_server, width=390, height=844)
    inner_width = browser.execute_script("return window.innerWidth")
    settings = browser.find_element("id", "settings")
    assert not settings.is_displayed()
    browser.find_element("id", "toggle-settings").click()
    assert settings.is_displayed()
    set_field(browser, "api_key", "sk-page")
    browser.find_element("id", "toggle-settings").click()
    assert not settings.is_displayed()
    wait_for(lambda: "stories260K" in text(browser, "model"), 30, "the model id")
    send_message(browser, "Once upon a time")
    wait_for(lambda: answer_state(browser) == "done", 60, "the answer")
    # the screen holds it all: the input, the buttons and the rate stay in view below a
    # long answer (the conversation scrolls, the page does not)
    inner_height = browser.execute_script("return window.innerHeight")
    for element_id in ("input", "send", "stop", "rate", "messages", "new-chat", "toggle-settings"):
        rect = browser.find_element("id", element_id).rect
        assert rect["x"] >= 0 and rect["x"] + rect["width"] <= inner_width, (element_id, rect, inner_width)
        assert rect["y"] >= 0 and rect["y"] + rect["height"] <= inner_height, (element_id, rect, inner_height)
    assert browser.execute_script("return document.documentElement.scrollWidth") <= inner_width
    assert browser.execute_script("return document.documentElement.scrollHeight") <= inner_height
    screenshot(browser, "chat_page_narrow.png")
    browser.execute_script("localStorage.clear()")
