//! The thread that owns enigo and the xcap monitors: every input step and capture runs here, in the order
//! asked, so nothing that is not `Send` on some platform ever crosses threads.

use std::sync::mpsc;
use std::time::Duration;

use agentd_computer::{Frame, MonitorInfo, MouseButton, Point, Size};
use enigo::{Axis, Coordinate, Direction, Enigo, Keyboard, Mouse, Settings};

use crate::error::{PortableError, input_error};
#[cfg(target_os = "linux")]
use crate::xkeyboard::XKeyboard;

/// One primitive of a composed action.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Moves the pointer to a point of the screen (monitor coordinates).
    Move(Point),
    /// Presses (`true`) or releases a button where the pointer is.
    Button(MouseButton, bool),
    /// Clicks a button this many times where the pointer is.
    Click(MouseButton, u32),
    /// Wheel notches, positive down (vertical) or right (horizontal).
    Scroll {
        vertical: bool,
        notches: i32,
    },
    Text(String),
    Pause(Duration),
    /// Presses the keys in order, runs the steps, releases the keys in reverse order (also after a failure).
    Hold(Vec<enigo::Key>, Vec<Step>),
}

/// `body` with `keys` held around it (a chord when `body` is empty).
pub(crate) fn holding(keys: Vec<enigo::Key>, body: Vec<Step>) -> Vec<Step> {
    if keys.is_empty() { body } else { vec![Step::Hold(keys, body)] }
}

type Job = Box<dyn FnOnce(&mut Desk) + Send>;

/// The handle the async side holds: jobs go to the thread, answers come back on a oneshot.
pub(crate) struct Worker {
    jobs: mpsc::Sender<Job>,
}

impl Worker {
    pub(crate) fn start(monitor: Option<usize>) -> Result<Self, PortableError> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("agentd-portable".into())
            .spawn(move || {
                let mut desk = Desk {
                    monitor,
                    enigo: None,
                    info: None,
                    held: Vec::new(),
                    #[cfg(target_os = "linux")]
                    keyboard: None,
                    #[cfg(target_os = "linux")]
                    pressed: Vec::new(),
                };
                while let Ok(job) = inbox.recv() {
                    job(&mut desk);
                }
                // Dropping enigo releases whatever it still holds.
            })
            .map_err(|e| PortableError::Connect(format!("cannot start the input thread: {e}")))?;
        Ok(Self { jobs })
    }

    /// Runs `f` on the thread and waits for its answer.
    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T, PortableError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Desk) -> Result<T, PortableError> + Send + 'static,
    {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |desk| {
            let _ = reply.send(f(desk));
        });
        self.jobs.send(job).map_err(|_| PortableError::WorkerGone)?;
        answer.await.map_err(|_| PortableError::WorkerGone)?
    }
}

/// What the thread owns.
pub(crate) struct Desk {
    monitor: Option<usize>,
    enigo: Option<Enigo>,
    /// The monitor as last listed (refreshed by every capture).
    info: Option<MonitorInfo>,
    /// Keys each `mouse_down` pressed with its button, released by the matching `mouse_up`.
    held: Vec<(MouseButton, Vec<enigo::Key>)>,
    /// The X display's keyboard mapping, where keys are placed on X11 (see [`XKeyboard`]); `None` elsewhere.
    #[cfg(target_os = "linux")]
    keyboard: Option<XKeyboard>,
    /// Keys pressed through [`Desk::key`] on X11 and not released yet, with the keycodes pressed for each.
    #[cfg(target_os = "linux")]
    pressed: Vec<(enigo::Key, Vec<u8>)>,
}

impl Desk {
    pub(crate) fn open(&mut self) -> Result<(), PortableError> {
        self.enigo()?;
        self.refresh()?;
        Ok(())
    }

    /// Sends one key event: on X11 as the keycodes this provider placed the key on (with Shift where the
    /// layout wants it and the held keys do not have it), elsewhere through enigo's own key mapping.
    fn key(&mut self, action: &'static str, key: enigo::Key, direction: Direction) -> Result<(), PortableError> {
        // Opens the connections (enigo's and, on X11, the keyboard's) when they are not open.
        self.enigo()?;
        #[cfg(target_os = "linux")]
        if self.keyboard.is_some() {
            return self.x_key(action, key, direction);
        }
        self.with_enigo(action, |e| e.key(key, direction))
    }

    #[cfg(target_os = "linux")]
    fn x_key(&mut self, action: &'static str, key: enigo::Key, direction: Direction) -> Result<(), PortableError> {
        if direction == Direction::Release {
            let keycodes = match self.pressed.iter().rposition(|(k, _)| *k == key) {
                Some(i) => self.pressed.remove(i).1,
                None => vec![self.place(&[keysym(key)])?[0].keycode],
            };
            return self.raw_keys(action, &keycodes, Direction::Release);
        }
        let place = self.place(&[keysym(key)])?[0];
        let holds_shift = self.pressed.iter().any(|(k, _)| is_shift(keysym(*k)));
        let mut keycodes = Vec::with_capacity(2);
        if place.shift && !holds_shift && !is_modifier(keysym(key)) {
            keycodes.push(self.shift_keycode()?);
        }
        keycodes.push(place.keycode);
        self.raw_keys(action, &keycodes, Direction::Press)?;
        if direction == Direction::Click {
            self.raw_keys(action, &keycodes, Direction::Release)
        } else {
            self.pressed.push((key, keycodes));
            Ok(())
        }
    }

    /// Presses `keycodes` in order, or releases them in reverse order, as they are.
    #[cfg(target_os = "linux")]
    fn raw_keys(&mut self, action: &'static str, keycodes: &[u8], direction: Direction) -> Result<(), PortableError> {
        let mut send = |keycode: u8| {
            if let Some(keyboard) = &mut self.keyboard {
                keyboard.touch(keycode);
            }
            self.with_enigo(action, |e| e.raw(u16::from(keycode), direction))
        };
        if direction == Direction::Release {
            keycodes.iter().rev().try_for_each(|&k| send(k))
        } else {
            keycodes.iter().try_for_each(|&k| send(k))
        }
    }

    /// Runs `f` on the X keyboard; a failure of its connection drops both connections, so the next call
    /// opens them again.
    #[cfg(target_os = "linux")]
    fn with_keyboard<T>(
        &mut self,
        f: impl FnOnce(&mut XKeyboard) -> Result<T, PortableError>,
    ) -> Result<T, PortableError> {
        let result = match &mut self.keyboard {
            Some(keyboard) => f(keyboard),
            None => Err(PortableError::Input("the X keyboard connection is closed".into())),
        };
        if matches!(result, Err(PortableError::Input(_))) {
            self.keyboard = None;
            self.enigo = None;
        }
        result
    }

    #[cfg(target_os = "linux")]
    fn place(&mut self, keysyms: &[u32]) -> Result<Vec<agentd_computer::keymap::KeyPlace>, PortableError> {
        self.with_keyboard(|keyboard| keyboard.place(keysyms))
    }

    #[cfg(target_os = "linux")]
    fn shift_keycode(&mut self) -> Result<u8, PortableError> {
        self.with_keyboard(|keyboard| keyboard.shift())
    }

    /// Types `text` (no control characters) on X11: run by run, each run's keys placed before its first key
    /// is sent, every character with Shift where the layout wants it.
    #[cfg(target_os = "linux")]
    fn x_type(&mut self, text: &str) -> Result<(), PortableError> {
        let keysyms: Vec<u32> = text.chars().map(|c| agentd_computer::Key::from_char(c).keysym).collect();
        let shift = self.shift_keycode()?;
        let mut start = 0;
        while start < keysyms.len() {
            let fits = self.with_keyboard(|keyboard| keyboard.fitting_run(&keysyms[start..]))?;
            if fits == 0 {
                return Err(PortableError::Unsupported {
                    action: "type",
                    reason: format!(
                        "cannot type {:?}: the keyboard layout lacks it and the X server has no spare keycode",
                        char::from_u32(keysyms[start]).unwrap_or('?')
                    ),
                });
            }
            let places = self.place(&keysyms[start..start + fits])?;
            for place in places {
                let keycodes = if place.shift { vec![shift, place.keycode] } else { vec![place.keycode] };
                self.raw_keys("type", &keycodes, Direction::Press)?;
                self.raw_keys("type", &keycodes, Direction::Release)?;
            }
            start += fits;
        }
        Ok(())
    }

    fn enigo(&mut self) -> Result<&mut Enigo, PortableError> {
        if self.enigo.is_none() {
            // No XTest delay on button and motion events (enigo's default is 12 ms each, which the server
            // waits out before it processes the event: a click took 24 ms); the X11 provider sends none either.
            let settings = Settings { release_keys_when_dropped: true, linux_delay: 0, ..Settings::default() };
            let enigo = Enigo::new(&settings).map_err(|e| PortableError::Connect(e.to_string()))?;
            #[cfg(target_os = "linux")]
            if self.keyboard.is_none() {
                self.keyboard = XKeyboard::open();
            }
            self.enigo = Some(enigo);
        }
        self.enigo.as_mut().ok_or_else(|| PortableError::Connect("no input connection".into()))
    }

    /// Runs one enigo call; a failure of the session drops the connection so the next call opens a new one.
    fn with_enigo<T>(
        &mut self,
        action: &'static str,
        f: impl FnOnce(&mut Enigo) -> enigo::InputResult<T>,
    ) -> Result<T, PortableError> {
        let result = f(self.enigo()?).map_err(|e| input_error(action, e));
        if matches!(result, Err(PortableError::Input(_))) {
            self.enigo = None;
        }
        result
    }

    pub(crate) fn monitors(&mut self) -> Result<Vec<MonitorInfo>, PortableError> {
        Ok(list()?.into_iter().map(|(_, info)| info).collect())
    }

    /// The chosen monitor, listed now.
    fn refresh(&mut self) -> Result<(xcap::Monitor, MonitorInfo), PortableError> {
        let mut all = list()?;
        let count = all.len();
        let index = match self.monitor {
            Some(index) => index,
            None => all.iter().position(|(_, info)| info.primary).unwrap_or(0),
        };
        if index >= count {
            return Err(PortableError::NoMonitor { index, count });
        }
        let (monitor, info) = all.swap_remove(index);
        self.info = Some(info.clone());
        Ok((monitor, info))
    }

    pub(crate) fn monitor_info(&mut self) -> Result<MonitorInfo, PortableError> {
        match &self.info {
            Some(info) => Ok(info.clone()),
            None => self.refresh().map(|(_, info)| info),
        }
    }

    pub(crate) fn capture(&mut self) -> Result<Frame, PortableError> {
        let (monitor, info) = self.refresh()?;
        let image = monitor.capture_image().map_err(|e| PortableError::Capture(e.to_string()))?;
        let size = Size::new(info.width, info.height);
        let rgb = to_rgb(image.as_raw(), Size::new(image.width(), image.height()), size)?;
        Frame::from_rgb(size, rgb).map_err(|e| PortableError::Capture(e.to_string()))
    }

    pub(crate) fn cursor(&mut self) -> Result<Point, PortableError> {
        let info = self.monitor_info()?;
        let (x, y) = self.with_enigo("cursor_position", |e| e.location())?;
        Ok(Point::new(x - info.x, y - info.y))
    }

    pub(crate) fn run(&mut self, steps: Vec<Step>) -> Result<(), PortableError> {
        for step in steps {
            self.step(step)?;
        }
        Ok(())
    }

    fn step(&mut self, step: Step) -> Result<(), PortableError> {
        match step {
            Step::Move(at) => {
                let info = self.monitor_info()?;
                self.with_enigo("move", |e| e.move_mouse(info.x + at.x, info.y + at.y, Coordinate::Abs))
            }
            Step::Button(button, down) => {
                let direction = if down { Direction::Press } else { Direction::Release };
                self.with_enigo("click", |e| e.button(enigo_button(button), direction))
            }
            Step::Click(button, times) => {
                for _ in 0..times {
                    self.with_enigo("click", |e| e.button(enigo_button(button), Direction::Click))?;
                }
                Ok(())
            }
            Step::Scroll { vertical, notches } => {
                if notches == 0 {
                    return Ok(());
                }
                let axis = if vertical { Axis::Vertical } else { Axis::Horizontal };
                self.with_enigo("scroll", |e| e.scroll(notches, axis))
            }
            Step::Text(text) => {
                self.enigo()?;
                for piece in text_pieces(&text) {
                    match piece {
                        #[cfg(target_os = "linux")]
                        Piece::Text(run) if self.keyboard.is_some() => self.x_type(run)?,
                        Piece::Text(run) => self.with_enigo("type", |e| e.text(run))?,
                        Piece::Key(key) => self.key("type", key, Direction::Click)?,
                    }
                }
                Ok(())
            }
            Step::Pause(duration) => {
                std::thread::sleep(duration);
                Ok(())
            }
            Step::Hold(keys, body) => {
                self.press_keys(keys.clone())?;
                let result = self.run(body);
                let released = self.release_keys(keys);
                result.and(released)
            }
        }
    }

    /// Presses `keys` in order; when one fails, the ones already down go up again.
    pub(crate) fn press_keys(&mut self, keys: Vec<enigo::Key>) -> Result<(), PortableError> {
        for (i, key) in keys.iter().enumerate() {
            if let Err(e) = self.key("keypress", *key, Direction::Press) {
                let _ = self.release_keys(keys[..i].to_vec());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Releases `keys` in reverse order, all of them even when one fails (the first failure is returned).
    pub(crate) fn release_keys(&mut self, keys: Vec<enigo::Key>) -> Result<(), PortableError> {
        let mut result = Ok(());
        for key in keys.iter().rev() {
            let released = self.key("keypress", *key, Direction::Release);
            if result.is_ok() {
                result = released;
            }
        }
        result
    }

    pub(crate) fn mouse_down(&mut self, button: MouseButton, keys: Vec<enigo::Key>) -> Result<(), PortableError> {
        self.press_keys(keys.clone())?;
        if let Err(e) = self.step(Step::Button(button, true)) {
            let _ = self.release_keys(keys);
            return Err(e);
        }
        // Held until the matching mouse_up.
        self.held.push((button, keys));
        Ok(())
    }

    pub(crate) fn mouse_up(&mut self, button: MouseButton) -> Result<(), PortableError> {
        let result = self.step(Step::Button(button, false));
        let keys = match self.held.iter().position(|(b, _)| *b == button) {
            Some(i) => self.held.remove(i).1,
            None => Vec::new(),
        };
        result.and(self.release_keys(keys))
    }
}

/// A part of a `type` text: characters for enigo's text entry, or a control character as its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Key(enigo::Key),
}

/// `text` split so that `\n` (and `\r\n`, and a lone `\r`) is Return and `\t` is Tab on every platform
/// (enigo's text entry types them differently per backend).
pub(crate) fn text_pieces(text: &str) -> Vec<Piece<'_>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let key = match c {
            '\n' => enigo::Key::Return,
            '\r' => {
                if matches!(chars.peek(), Some((_, '\n'))) {
                    chars.next();
                }
                enigo::Key::Return
            }
            '\t' => enigo::Key::Tab,
            _ => continue,
        };
        if start < i {
            pieces.push(Piece::Text(&text[start..i]));
        }
        pieces.push(Piece::Key(key));
        start = chars.peek().map_or(text.len(), |(j, _)| *j);
    }
    if start < text.len() {
        pieces.push(Piece::Text(&text[start..]));
    }
    pieces
}

/// The keysym enigo's X backend sends for `key`.
#[cfg(target_os = "linux")]
fn keysym(key: enigo::Key) -> u32 {
    xkeysym::Keysym::from(key).raw()
}

#[cfg(target_os = "linux")]
fn is_shift(keysym: u32) -> bool {
    matches!(keysym, 0xffe1 | 0xffe2)
}

#[cfg(target_os = "linux")]
fn is_modifier(keysym: u32) -> bool {
    agentd_computer::Key { keysym }.is_modifier()
}

fn enigo_button(button: MouseButton) -> enigo::Button {
    match button {
        MouseButton::Left => enigo::Button::Left,
        MouseButton::Right => enigo::Button::Right,
        MouseButton::Middle => enigo::Button::Middle,
        MouseButton::Back => enigo::Button::Back,
        MouseButton::Forward => enigo::Button::Forward,
    }
}

/// xcap's monitors with what agentd needs of each.
fn list() -> Result<Vec<(xcap::Monitor, MonitorInfo)>, PortableError> {
    let failed = |e: xcap::XCapError| PortableError::Capture(format!("cannot list the monitors: {e}"));
    let monitors = xcap::Monitor::all().map_err(failed)?;
    let mut listed = Vec::with_capacity(monitors.len());
    for (index, monitor) in monitors.into_iter().enumerate() {
        let info = MonitorInfo {
            index,
            name: monitor.name().unwrap_or_default(),
            x: monitor.x().map_err(failed)?,
            y: monitor.y().map_err(failed)?,
            width: monitor.width().map_err(failed)?,
            height: monitor.height().map_err(failed)?,
            primary: monitor.is_primary().unwrap_or(false),
        };
        listed.push((monitor, info));
    }
    Ok(listed)
}

/// RGBA pixels of an image of `from` as RGB of `to`: copied when the sizes agree, sampled (nearest pixel)
/// when the capture is larger (a HiDPI monitor captured in device pixels) or smaller.
pub(crate) fn to_rgb(rgba: &[u8], from: Size, to: Size) -> Result<Vec<u8>, PortableError> {
    let needed = from.area() as usize * 4;
    if rgba.len() < needed || from.width == 0 || from.height == 0 {
        return Err(PortableError::Capture(format!("a {from} capture came with {} bytes", rgba.len())));
    }
    if from == to {
        return Ok(rgba.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect());
    }
    let mut out = Vec::with_capacity(to.area() as usize * 3);
    for y in 0..to.height {
        let sy = (u64::from(y) * u64::from(from.height) / u64::from(to.height)) as usize;
        let row = sy * from.width as usize;
        for x in 0..to.width {
            let sx = (u64::from(x) * u64::from(from.width) / u64::from(to.width)) as usize;
            let p = (row + sx) * 4;
            out.extend_from_slice(&rgba[p..p + 3]);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newlines_and_tabs_are_keys() {
        use enigo::Key::{Return, Tab};
        assert_eq!(text_pieces("héllo"), vec![Piece::Text("héllo")]);
        assert_eq!(
            text_pieces("a\nb\r\nc\td\r"),
            vec![
                Piece::Text("a"),
                Piece::Key(Return),
                Piece::Text("b"),
                Piece::Key(Return),
                Piece::Text("c"),
                Piece::Key(Tab),
                Piece::Text("d"),
                Piece::Key(Return)
            ]
        );
        assert_eq!(text_pieces("\n\n"), vec![Piece::Key(Return), Piece::Key(Return)]);
        assert_eq!(text_pieces(""), Vec::<Piece>::new());
    }

    #[test]
    fn captures_become_rgb_of_the_screen_size() {
        let rgba = [1, 2, 3, 255, 4, 5, 6, 255];
        assert_eq!(to_rgb(&rgba, Size::new(2, 1), Size::new(2, 1)).unwrap(), vec![1, 2, 3, 4, 5, 6]);
        // A 2x capture of a 1x1 monitor: the top-left device pixel.
        let hidpi = [9, 9, 9, 255, 0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255];
        assert_eq!(to_rgb(&hidpi, Size::new(2, 2), Size::new(1, 1)).unwrap(), vec![9, 9, 9]);
        assert!(to_rgb(&rgba, Size::new(3, 1), Size::new(3, 1)).is_err());
    }
}
